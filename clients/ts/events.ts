// Written by hand (make generate leaves it alone): a resuming watch of
// EventService.StreamEvents over the generated descriptors.

import { Code, ConnectError, createClient, type Transport } from "@connectrpc/connect";

import { type Event, EventService } from "./gen/sheba/v1/event_pb.js";

/** What {@link watchEvents} takes beside the transport. */
export interface WatchEventsOptions {
  /** The API key, sent as x-api-key. */
  apiKey: string;
  /** The event types to watch (such as "subscription.created"); all when empty. */
  eventTypes?: string[];
  /**
   * Where to start: after this event id or heartbeat cursor (the last
   * position a previous watch reported to onPosition); from now when empty.
   */
  after?: string;
  /** Ends the watch: the generator then returns. */
  signal?: AbortSignal;
  /** Called with the position of every message, an event's id or a heartbeat's cursor: keep the last one to resume after it later. */
  onPosition?: (position: string) => void;
  /**
   * How long to wait before opening the stream again after it ended
   * (default 1000 ms): doubled after each stream that ended before its
   * first message, up to maxRetryDelayMs, and jittered (a half to the
   * whole of it), so that the clients of a replica that shut down do not
   * all come back at once.
   */
  retryDelayMs?: number;
  /** The longest wait between two opens (default 30000 ms). */
  maxRetryDelayMs?: number;
}

/**
 * watchEvents yields the caller's events as sheba streams them
 * (EventService.StreamEvents), over any Connect-ES transport (Connect or
 * gRPC-Web). When the stream ends, as it does after events.max_duration,
 * at a server's shutdown (UNAVAILABLE), when the client read too slowly
 * (RESOURCE_EXHAUSTED STREAM_TOO_SLOW) or when the network fails, it opens
 * it again after the last position it received, an event's id or a
 * heartbeat's cursor: sheba then sends every event committed after it, so
 * none is missed (an event may come twice: the delivery is at least once).
 * Any other error (a refused key, a bad event type, a cursor past the
 * retention: OUT_OF_RANGE EVENT_CURSOR_EXPIRED) is thrown as a
 * ConnectError. It returns when signal aborts.
 */
export async function* watchEvents(transport: Transport, opts: WatchEventsOptions): AsyncGenerator<Event> {
  const client = createClient(EventService, transport);
  const { signal } = opts;
  let after = opts.after ?? "";
  const moved = (position: string): void => {
    after = position;
    opts.onPosition?.(position);
  };
  // failed counts the opens in a row that ended before a message.
  let failed = 0;
  while (!signal?.aborted) {
    let received = false;
    try {
      const stream = client.streamEvents(
        { eventTypes: opts.eventTypes ?? [], afterEventId: after },
        { headers: { "x-api-key": opts.apiKey }, signal },
      );
      for await (const res of stream) {
        received = true;
        switch (res.message.case) {
          case "event":
            moved(res.message.value.id);
            yield res.message.value;
            break;
          case "heartbeat":
            moved(res.message.value.cursor);
            break;
        }
      }
    } catch (err) {
      const e = ConnectError.from(err);
      if (signal?.aborted) {
        return;
      }
      if (!resumable(e.code)) {
        throw e;
      }
    }
    failed = received ? 0 : failed + 1;
    await sleep(retryDelay(opts, failed), signal);
  }
}

// retryDelay is the wait before the next open after failed opens in a row
// that received nothing: retryDelayMs doubled for each, at most
// maxRetryDelayMs, then a random half to the whole of it.
function retryDelay(opts: WatchEventsOptions, failed: number): number {
  const base = opts.retryDelayMs ?? 1000;
  const delay = Math.min(base * 2 ** Math.min(failed, 16), opts.maxRetryDelayMs ?? 30000);
  return delay / 2 + (Math.random() * delay) / 2;
}

// resumable says whether a stream that ended with code is opened again:
// the ends sheba gives a stream that a client resumes (max_duration,
// shutdown, a full buffer, too many streams for now) and the failures of
// the network, which Connect-ES reports as UNKNOWN or UNAVAILABLE.
function resumable(code: Code): boolean {
  return code === Code.Unavailable || code === Code.ResourceExhausted || code === Code.Unknown || code === Code.Aborted;
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(done, ms);
    signal?.addEventListener("abort", done, { once: true });
    function done(): void {
      clearTimeout(timer);
      signal?.removeEventListener("abort", done);
      resolve();
    }
  });
}
