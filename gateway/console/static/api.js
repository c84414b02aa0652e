// The console's only way to the node: the public /v1 API, with the credentials the user gave
// (kept in this tab's session storage, never sent anywhere but this node).

const CREDENTIALS = "sluice.console.authorization";

/** An answer that was not a success: the problem document's title and detail, or the status. */
export class ApiError extends Error {
  constructor(status, problem) {
    super(problem.detail || problem.title || `HTTP ${status}`);
    this.status = status;
    this.problem = problem;
  }
}

const listeners = new Set();

/** Call `handler(error)` whenever the node asks for credentials (401). */
export function onUnauthenticated(handler) {
  listeners.add(handler);
}

export function authorization() {
  return sessionStorage.getItem(CREDENTIALS);
}

/** Keep an API key (Bearer) or a Basic login for this tab. */
export function signIn(kind, first, second) {
  const value =
    kind === "basic"
      ? `Basic ${btoa(String.fromCodePoint(...new TextEncoder().encode(`${first}:${second}`)))}`
      : `Bearer ${first}`;
  sessionStorage.setItem(CREDENTIALS, value);
}

export function signOut() {
  sessionStorage.removeItem(CREDENTIALS);
}

function headers(extra) {
  const all = { Accept: "application/json", ...extra };
  const auth = authorization();
  if (auth) all.Authorization = auth;
  return all;
}

async function failure(response) {
  let problem = { title: response.statusText, status: response.status };
  const type = response.headers.get("Content-Type") || "";
  if (type.includes("json")) {
    try {
      problem = await response.json();
    } catch {
      // the body was not the JSON it claimed: keep the status line
    }
  }
  const error = new ApiError(response.status, problem);
  if (response.status === 401) listeners.forEach((handler) => handler(error));
  return error;
}

/** `method path` with an optional JSON body; the parsed answer (null for 204). */
export async function api(method, path, body, signal) {
  const init = { method, headers: headers(), signal };
  if (body !== undefined) {
    init.body = JSON.stringify(body);
    init.headers["Content-Type"] = "application/json";
  }
  const response = await fetch(path, init);
  if (!response.ok) throw await failure(response);
  return response.status === 204 ? null : response.json();
}

export const get = (path, signal) => api("GET", path, undefined, signal);

/** A path with its segments escaped: `path("/v1/topics", name)`. */
export function path(...parts) {
  return parts.map((part, i) => (i === 0 ? part : encodeURIComponent(part))).join("/");
}

/**
 * Read Server-Sent Events streams (`/v1/topics/{t}/events`) one after another with fetch, so
 * the credentials go in the Authorization header (EventSource cannot send one). `urlFor(lastId)`
 * names each stream (the first with `lastId` null); a new one opens when the last ends or drops,
 * at most one per `intervalMs`. `onEvent(type, data, id)` for each event; `onState(text)` says
 * whether it is connected; it stops when `signal` aborts, or throws a refusal (4xx).
 */
export async function follow(urlFor, { onEvent, onState, signal, intervalMs = 1000 }) {
  const position = { lastId: null }; // kept across a stream that drops midway
  while (!signal.aborted) {
    const opened = Date.now();
    try {
      const response = await fetch(urlFor(position.lastId), {
        headers: headers({ Accept: "text/event-stream" }),
        signal,
      });
      if (!response.ok) throw await failure(response);
      onState("connected");
      await readEvents(response.body, onEvent, signal, position);
    } catch (error) {
      if (signal.aborted) return;
      if (error instanceof ApiError && error.status < 500) throw error;
      onState("reconnecting");
    }
    await new Promise((resolve) => setTimeout(resolve, Math.max(0, opened + intervalMs - Date.now())));
  }
}

async function readEvents(body, onEvent, signal, position) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  signal.addEventListener("abort", () => reader.cancel().catch(() => {}), { once: true });
  let buffer = "";
  let event = { type: "message", data: [], id: null };
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    let end;
    while ((end = buffer.search(/\r\n|\r|\n/)) >= 0) {
      const line = buffer.slice(0, end);
      buffer = buffer.slice(buffer[end] === "\r" && buffer[end + 1] === "\n" ? end + 2 : end + 1);
      if (line === "") {
        if (event.id !== null) position.lastId = event.id;
        if (event.data.length) onEvent(event.type, event.data.join("\n"), position.lastId);
        event = { type: "message", data: [], id: null };
        continue;
      }
      if (line.startsWith(":")) continue;
      const colon = line.indexOf(":");
      const field = colon < 0 ? line : line.slice(0, colon);
      const text = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
      if (field === "event") event.type = text;
      else if (field === "data") event.data.push(text);
      else if (field === "id") event.id = text;
    }
  }
}
