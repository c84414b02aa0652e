// Transactions (KIP-98): the cluster's transactional ids, filtered by state, and one id's
// transaction (its producer id and epoch, the partitions it wrote, the offsets it carries);
// an operator's abort of an open one, offered only to a principal with ALTER on the cluster.

import { api, get, path } from "./api.js";
import { confirm, empty, facts, h, heading, link, origin, plural, problem, refresh, show, table } from "./ui.js";

const STATES = ["Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort"];

const when = (ms) => h("time", { datetime: new Date(ms).toISOString() }, new Date(ms).toISOString());

function filter(state) {
  const select = h("select", { id: "transactions-state", name: "state" },
    h("option", { value: "" }, "every state"),
    STATES.map((s) => h("option", { value: s, selected: s === state }, s)));
  const el = h("form", { class: "action" },
    h("fieldset", {}, h("legend", {}, "Show transactions in"),
      h("div", { class: "field" }, h("label", { for: select.id }, "State"), select),
      h("button", { type: "submit" }, "Show")));
  el.addEventListener("submit", (event) => {
    event.preventDefault();
    location.hash = select.value ? `#/transactions?state=${select.value}` : "#/transactions";
  });
  return el;
}

export async function list(_params, query, signal) {
  const state = STATES.includes(query.get("state")) ? query.get("state") : "";
  const { transactions } = await get(`/v1/transactions${state ? `?state=${state}` : ""}`, signal);
  return h(
    "section",
    {},
    heading("Transactions"),
    filter(state),
    transactions.length
      ? table(
          state ? `${plural(transactions.length, "transaction")} ${state}` : plural(transactions.length, "transaction"),
          [
            ["Transactional id", (t) => link(path("/transactions", t.transactional_id), t.transactional_id)],
            ["State", (t) => t.state],
            ["Producer id", (t) => String(t.producer_id)],
            ["Epoch", (t) => t.producer_epoch],
            ["Partitions", (t) => t.partitions.length],
            ["Began", (t) => when(t.started_ms)],
            ["Expires", (t) => (t.expires_ms === undefined ? "—" : when(t.expires_ms))],
          ],
          transactions,
        )
      : empty(
          state
            ? `No transaction is ${state} (or none you may describe).`
            : "No transactions yet (or none you may describe). A producer begins one with:",
          state ? null : `curl -X POST ${origin()}/v1/transactions/my-producer -H 'Content-Type: application/json' -d '{"timeout_ms": 60000}'`,
        ),
  );
}

/** The abort button of an open transaction, for a principal who may alter the cluster. */
function abortSection(txn, me) {
  if (!me.cluster_authorized_operations.includes("alter")) {
    return h("p", { class: "note", id: "no-abort" }, "You may not abort transactions: that needs ALTER on the cluster.");
  }
  if (txn.state !== "Ongoing") {
    return h("p", { class: "note" }, `Nothing to abort: the transaction is ${txn.state}.`);
  }
  const status = h("div", { "aria-live": "polite" });
  const button = h("button", { type: "button", class: "danger", id: "abort-transaction" }, "Abort transaction…");
  button.addEventListener("click", async () => {
    const question = `Abort transaction ${txn.transactional_id}? Its records are never read committed, its offsets are not committed, and its producer's next call is refused.`;
    if (!(await confirm(question, "Abort"))) return;
    try {
      await api("POST", path("/v1/transactions", txn.transactional_id, "abort"));
      refresh();
    } catch (error) {
      status.replaceChildren(problem(error));
    }
  });
  return h("div", {}, h("p", {}, "An operator's abort, as kafka-transactions.sh abort: for a transaction left open by a producer that went away."), button, status);
}

export async function detail([name], _query, signal, me) {
  const txn = await get(path("/v1/transactions", name), signal);
  const offsets = txn.pending_offsets.flatMap((g) => g.offsets.map((o) => ({ group: g.group_id, ...o })));
  return h(
    "section",
    {},
    heading(`Transaction ${name}`),
    facts([
      ["State", txn.state],
      ["Producer id", String(txn.producer_id)],
      ["Producer epoch", txn.producer_epoch],
      ["Timeout", `${txn.timeout_ms} ms`],
      ["Began", when(txn.started_ms)],
      ...(txn.expires_ms === undefined ? [] : [["Expires", when(txn.expires_ms)]]),
      ["Last change", when(txn.updated_ms)],
      ["Began by", show(txn.principal)],
      ...(txn.abort_cause ? [["Aborted by", txn.abort_cause]] : []),
    ]),
    txn.partitions.length
      ? table(
          "Partitions written",
          [
            ["Topic", (p) => link(path("/topics", p.topic), p.topic)],
            ["Partition", (p) => p.partition],
          ],
          txn.partitions,
        )
      : h("p", { class: "note" }, txn.state === "Ongoing" ? "No partition written yet." : "No partitions: a complete transaction's markers are written."),
    offsets.length
      ? table(
          "Offsets committed if it commits",
          [
            ["Group", (o) => link(path("/groups", o.group), o.group)],
            ["Topic", (o) => o.topic],
            ["Partition", (o) => o.partition],
            ["Offset", (o) => o.offset],
          ],
          offsets,
        )
      : null,
    h("h2", {}, "Abort"),
    abortSection(txn, me),
  );
}
