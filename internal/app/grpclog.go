package app

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"google.golang.org/grpc/grpclog"
)

// grpcLogger routes grpc-go's own log lines (transport and connection
// troubles, mostly) into slog, as records with logger=grpc, so that they
// come out in the same format as sheba's. grpc-go's Info lines are Debug
// here: they are chatty and only help when debugging grpc itself.
type grpcLogger struct {
	log *slog.Logger
}

var _ grpclog.LoggerV2 = grpcLogger{}

// newGRPCLogger returns the grpclog.LoggerV2 over log.
func newGRPCLogger(log *slog.Logger) grpcLogger {
	return grpcLogger{log: log.With("logger", "grpc")}
}

func (g grpcLogger) emit(level slog.Level, msg string) {
	g.log.Log(context.Background(), level, msg)
}

func (g grpcLogger) Info(args ...any)   { g.emit(slog.LevelDebug, fmt.Sprint(args...)) }
func (g grpcLogger) Infoln(args ...any) { g.emit(slog.LevelDebug, sprintln(args)) }
func (g grpcLogger) Infof(format string, args ...any) {
	g.emit(slog.LevelDebug, fmt.Sprintf(format, args...))
}
func (g grpcLogger) Warning(args ...any)   { g.emit(slog.LevelWarn, fmt.Sprint(args...)) }
func (g grpcLogger) Warningln(args ...any) { g.emit(slog.LevelWarn, sprintln(args)) }
func (g grpcLogger) Warningf(format string, args ...any) {
	g.emit(slog.LevelWarn, fmt.Sprintf(format, args...))
}
func (g grpcLogger) Error(args ...any)   { g.emit(slog.LevelError, fmt.Sprint(args...)) }
func (g grpcLogger) Errorln(args ...any) { g.emit(slog.LevelError, sprintln(args)) }
func (g grpcLogger) Errorf(format string, args ...any) {
	g.emit(slog.LevelError, fmt.Sprintf(format, args...))
}

// Fatal logs and exits 1, as grpclog.LoggerV2 requires.
func (g grpcLogger) Fatal(args ...any) { g.emit(slog.LevelError, fmt.Sprint(args...)); os.Exit(1) }

// Fatalln logs and exits 1.
func (g grpcLogger) Fatalln(args ...any) { g.emit(slog.LevelError, sprintln(args)); os.Exit(1) }

// Fatalf logs and exits 1.
func (g grpcLogger) Fatalf(format string, args ...any) {
	g.emit(slog.LevelError, fmt.Sprintf(format, args...))
	os.Exit(1)
}

// V reports whether verbosity level l is logged: grpc-go's verbose lines
// are only for debugging grpc itself, and stay off.
func (g grpcLogger) V(l int) bool { return l <= 0 }

// sprintln is fmt.Sprintln without the newline.
func sprintln(args []any) string {
	s := fmt.Sprintln(args...)
	return s[:len(s)-1]
}
