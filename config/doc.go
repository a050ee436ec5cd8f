// Package config holds sheba's settings (docs/configuration.md): the Config
// struct with its defaults, loading from one YAML file plus environment
// overrides, and validation.
//
// Load reads the file strictly (an unknown key or a value of the wrong type
// is an error), then applies environment variables, then validates. Every
// scalar key can be overridden by SHEBA_<SECTION>_<KEY> (for example
// SHEBA_LIMITS_MAX_INFLIGHT=50 or SHEBA_SHUTDOWN_DRAIN_DELAY=5s); list keys
// take a YAML or JSON flow value (SHEBA_AUTH_PUBLIC='["/sheba.v1.PingService/Ping"]'); and
// DATABASE_URL overrides database.url, winning over SHEBA_DATABASE_URL. An
// empty variable counts as unset. The variable names are derived from the
// yaml tags of Config, so a new key gets its variable without further code.
//
// Every problem is reported as an *Error whose text is one line naming the
// key as written in the YAML, and the variable when the value came from the
// environment, so that cmd/ can print it as is and exit with status 2.
//
// The package never reads the process environment itself: the caller passes
// a lookup function with the signature of os.LookupEnv.
package config
