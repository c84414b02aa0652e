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

/**
 * An integer beyond 2^53 as the node sent it: JSON.parse would round it (Long.MAX, the default
 * `flush.ms`, would read 9223372036854776000), so its digits are kept. It shows as its digits
 * (`String`, template literals) and compares and computes as the nearest Number.
 */
export class ExactInteger {
  constructor(digits) {
    this.digits = digits;
  }

  toString() {
    return this.digits;
  }

  valueOf() {
    return Number(this.digits);
  }
}

// One token at a time: a string (skipped whole, so digits inside it stay text) or a number.
const TOKENS = /"(?:[^"\\]|\\.)*"|-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?/g;
const MARK = `\u0000exact-${Math.random().toString(36).slice(2)}:`;

/** JSON text as values, integers beyond 2^53 as ExactIntegers (the only place JSON is read). */
export function parseJSON(text) {
  if (!/\d{16}/.test(text)) return JSON.parse(text); // no integer that long: nothing to keep
  let kept = false;
  const marked = text.replace(TOKENS, (token) => {
    if (token[0] === '"' || /[.eE]/.test(token) || Number.isSafeInteger(Number(token))) return token;
    kept = true;
    return JSON.stringify(MARK + token);
  });
  if (!kept) return JSON.parse(text);
  return JSON.parse(marked, (_key, value) =>
    typeof value === "string" && value.startsWith(MARK) ? new ExactInteger(value.slice(MARK.length)) : value);
}

/** JSON.stringify, ExactIntegers written as their digits (for a request, or a record shown). */
export function toJSON(value, space) {
  const text = JSON.stringify(value, (_key, v) => (v instanceof ExactInteger ? MARK + v.digits : v), space);
  if (!text || !text.includes("exact-")) return text;
  const escaped = JSON.stringify(MARK).slice(1, -1).replace(/[\\^$.*+?()[\]{}|]/g, "\\$&");
  return text.replace(new RegExp(`"${escaped}(-?\\d+)"`, "g"), "$1");
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
      problem = parseJSON(await response.text());
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
    init.body = toJSON(body);
    init.headers["Content-Type"] = "application/json";
  }
  const response = await fetch(path, init);
  if (!response.ok) throw await failure(response);
  return response.status === 204 ? null : parseJSON(await response.text());
}

export const get = (path, signal) => api("GET", path, undefined, signal);

/**
 * Who the credentials are and what they may do to the cluster (`GET /v1/auth/whoami`:
 * `{principal, auth, super_user, cluster_authorized_operations}`), asked before each page so
 * that a page offers only what the node would allow instead of trying it. On a node with
 * --auth and no credentials yet it answers 401, which opens the sign-in form: the one refusal
 * the console asks for.
 */
export const whoami = (signal) => get("/v1/auth/whoami", signal);

/** A describe answer (cluster, topic, group) with what these credentials may do to the
 * resource: its `authorized_operations` (Kafka's KIP-430). */
export const describe = (path_, signal) => get(`${path_}?include_authorized_operations=true`, signal);

/** A page the principal may not see, told without asking the node (whoami said so): shown as
 * the node's refusals are, under "Access refused". */
export function notAllowed(me, what) {
  return new ApiError(403, {
    title: "Not allowed",
    detail: `Principal '${me.principal}' may not ${what}: ask an administrator for the ACL.`,
  });
}

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
