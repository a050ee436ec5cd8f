// The example page (index.html): Ping, then ListSubscriptions with the key
// the user typed, through the generated client (clients/ts) over a
// Connect-ES transport. `make example-browser` bundles and serves it.
//
// The query can fill the form and start the calls at once, which is how the
// browser test (e2e/browserpage_test.go) drives it:
// ?server=http://127.0.0.1:8080&key=KEY&protocol=grpc-web. A key in a URL
// ends up in the history and in logs: type it in the form for real keys.
//
// Below, the page watches the key's events (watchEvents, clients/ts/events.ts),
// a list that grows as they come; the query starts it too: watch=TYPE (or
// watch= for every type), and max=N stops after N events.

import { Code, ConnectError, createClient, type Transport } from "@connectrpc/connect";
import { createConnectTransport, createGrpcWebTransport } from "@connectrpc/connect-web";
import { timestampDate } from "@bufbuild/protobuf/wkt";

import { PingService, type Subscription, SubscriptionService, SubscriptionStatus } from "../../clients/ts/index.js";
import { watchEvents } from "../../clients/ts/events.js";

function byId<T extends HTMLElement>(id: string): T {
  const el = document.getElementById(id);
  if (el === null) {
    throw new Error(`index.html has no #${id}`);
  }
  return el as T;
}

const form = byId<HTMLFormElement>("call");
const server = byId<HTMLInputElement>("server");
const protocol = byId<HTMLSelectElement>("protocol");
const key = byId<HTMLInputElement>("key");
const state = byId<HTMLParagraphElement>("state");
const pong = byId<HTMLOutputElement>("pong");
const table = byId<HTMLTableElement>("subscriptions");

// transport speaks the protocol chosen in the form to baseUrl.
function transport(name: string, baseUrl: string): Transport {
  switch (name) {
    case "connect-proto":
      return createConnectTransport({ baseUrl, useBinaryFormat: true });
    case "grpc-web":
      return createGrpcWebTransport({ baseUrl, useBinaryFormat: true });
    default:
      return createConnectTransport({ baseUrl });
  }
}

// show says where the calls are; data-state (idle, calling, done, failed)
// is what the browser test waits for.
function show(s: "calling" | "done" | "failed", text: string): void {
  state.dataset.state = s;
  state.textContent = text;
}

function row(sub: Subscription): HTMLTableRowElement {
  const tr = document.createElement("tr");
  const created = sub.createTime ? timestampDate(sub.createTime).toISOString() : "";
  for (const text of [sub.id, sub.accountId, sub.plan, SubscriptionStatus[sub.status], created]) {
    const td = document.createElement("td");
    td.textContent = text;
    tr.append(td);
  }
  return tr;
}

async function call(): Promise<void> {
  const t = transport(protocol.value, server.value);
  pong.textContent = "";
  table.hidden = true;
  table.tBodies[0].replaceChildren();
  show("calling", `Calling ${server.value}…`);
  try {
    // Ping is public: it needs no key.
    const res = await createClient(PingService, t).ping({});
    pong.textContent = res.message;
    const list = await createClient(SubscriptionService, t).listSubscriptions(
      { pageSize: 50 },
      { headers: { "x-api-key": key.value } },
    );
    table.tBodies[0].append(...list.subscriptions.map(row));
    table.hidden = false;
    const n = list.subscriptions.length;
    const more = list.nextPageToken === "" ? "" : " (the first page)";
    show("done", `${n} subscription${n === 1 ? "" : "s"}${more}`);
  } catch (err) {
    // A refused origin reaches here as a failed fetch: the browser hides
    // the answer from the page, so all it can say is that the call failed.
    const e = ConnectError.from(err);
    show("failed", `Failed: ${Code[e.code]}: ${e.rawMessage}`);
  }
}

form.addEventListener("submit", (ev) => {
  ev.preventDefault();
  void call();
});

const watchForm = byId<HTMLFormElement>("watch");
const types = byId<HTMLSelectElement>("types");
const watchButton = byId<HTMLButtonElement>("watch-button");
const watchState = byId<HTMLParagraphElement>("watch-state");
const eventList = byId<HTMLUListElement>("events");
let watching: AbortController | undefined;

// showWatch says where the watch is; data-state (idle, watching, stopped,
// failed) is what the browser test waits for.
function showWatch(s: "watching" | "stopped" | "failed", text: string): void {
  watchState.dataset.state = s;
  watchState.textContent = text;
}

// watch shows the events of the chosen type as they come, until stopped
// or, with max, after max events.
async function watch(max: number): Promise<void> {
  watching?.abort();
  const ctl = new AbortController();
  watching = ctl;
  watchButton.textContent = "Stop";
  eventList.replaceChildren();
  showWatch("watching", `Watching ${types.value || "every type"}…`);
  let n = 0;
  try {
    const events = watchEvents(transport(protocol.value, server.value), {
      apiKey: key.value,
      eventTypes: types.value === "" ? [] : [types.value],
      signal: ctl.signal,
    });
    for await (const ev of events) {
      const li = document.createElement("li");
      const at = ev.createTime ? timestampDate(ev.createTime).toISOString() : "";
      li.textContent = `${at} ${ev.type} ${ev.id} ${JSON.stringify(ev.data ?? {})}`;
      li.dataset.type = ev.type;
      eventList.append(li);
      n++;
      if (max > 0 && n >= max) {
        ctl.abort();
      }
    }
    showWatch("stopped", `Stopped after ${n} event${n === 1 ? "" : "s"}`);
  } catch (err) {
    const e = ConnectError.from(err);
    showWatch("failed", `Failed: ${Code[e.code]}: ${e.rawMessage}`);
  } finally {
    if (watching === ctl) {
      watching = undefined;
      watchButton.textContent = "Watch events";
    }
  }
}

watchForm.addEventListener("submit", (ev) => {
  ev.preventDefault();
  if (watching !== undefined) {
    watching.abort();
    return;
  }
  void watch(0);
});

const query = new URLSearchParams(location.search);
server.value = query.get("server") ?? server.value;
protocol.value = query.get("protocol") ?? protocol.value;
key.value = query.get("key") ?? "";
if (query.has("watch")) {
  types.value = query.get("watch") ?? "";
  void watch(Number(query.get("max") ?? "0"));
} else if (query.has("key")) {
  void call();
}
