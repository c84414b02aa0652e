// Cluster: the nodes (alive, controller, rack, URL), the partitions each leads, the partition
// moves in progress with the bytes copied, and the partitions that are under-replicated or
// offline. And what an operator does to them: move partitions (a plan, a throttle), cancel
// moves, set the throttle, balance the nodes, decommission a node, remove a lost one; the
// last three show the node's dry-run plan before anything moves.

import { api, describe, get, notAllowed, parseJSON, path } from "./api.js";
import {
  bytes, confirm, empty, facts, field, form, h, heading, link, plural, problem, refresh, table,
} from "./ui.js";

const REASSIGNMENTS = "/v1/cluster/reassignments";
const PLAN_ROWS = 100; // a plan's moves listed on screen; the counts above them say the rest
const EXAMPLE_PLAN = '{"version": 1, "partitions": [{"topic": "orders", "partition": 0, "replicas": [1, 2, 3]}]}';

/** Every topic's description (internal ones too), asked in parallel. */
export async function describeAll(signal, internal = true) {
  const { topics } = await get(`/v1/topics?internal=${internal}`, signal);
  return Promise.all(topics.map((t) => get(path("/v1/topics", t.name), signal)));
}

/** Each added replica's copy against the leader's: "node 3: 1.2 MB of 4.0 MB (30%)". */
function copied(move) {
  const total = move.leader_size_bytes;
  return move.progress
    .map((p) => {
      if (p.in_sync) return `node ${p.replica}: in sync`;
      if (p.size_bytes === null || total === null) return `node ${p.replica}: copying`;
      const share = total ? Math.min(100, Math.floor((100 * p.size_bytes) / total)) : 100;
      return `node ${p.replica}: ${bytes(p.size_bytes)} of ${bytes(total)} (${share}%)`;
    })
    .join("; ");
}

/** The throttle in words: "9.8 KiB/s per node", or "none". */
const rate = (throttle) => (throttle === null ? "none" : `${bytes(throttle)}/s per node`);

/** The nodes that may be given replicas: live, neither leaving nor removed nor shutting down. */
const inService = (nodes) => nodes.filter((n) => n.alive && !n.state && !n.shutting_down);

/** Set the reassignment throttle every node applies (null lifts it). */
const setThrottle = (bytesPerSecond) =>
  api("PUT", `${REASSIGNMENTS}/throttle`, { bytes_per_second: bytesPerSecond });

/** A refusal made here, before asking the node, shown as the node's own problems are. */
function invalid(title, detail) {
  return Object.assign(new Error(detail), { problem: { title, detail } });
}

/** The textarea's plan as JSON; text that is not JSON is refused here, with the parser's word. */
function parsePlan(text) {
  try {
    return parseJSON(text);
  } catch (error) {
    throw invalid("The plan is not JSON", error.message);
  }
}

/**
 * A button that asks `question` (`action` on the confirming button, `typed` a word to type),
 * then runs `run()` and shows the page again, or puts the refusal in `status`.
 */
function confirmed(attrs, text, status, [question, action, typed], run) {
  return h("button", {
    type: "button",
    ...attrs,
    onclick: async () => {
      status.replaceChildren();
      if (!(await confirm(question, action, typed))) return;
      try {
        await run();
        refresh();
      } catch (error) {
        status.replaceChildren(problem(error));
      }
    },
  }, text);
}

/** The form that starts a plan; its throttle is set first, so no byte copies unthrottled,
 * and put back as the page read it if the node refuses the plan (none of a refused plan starts). */
function moveForm(throttle) {
  return form(
    "Move partitions",
    [
      field("Plan", h("textarea", { id: "move-plan", name: "plan", rows: 5, cols: 60, required: true, spellcheck: "false", placeholder: EXAMPLE_PLAN }),
        "kafka-reassign-partitions JSON; the first replica of each list is its preferred leader"),
      field("Throttle (bytes/s per node)", h("input", { id: "move-throttle", name: "throttle", type: "number", min: 1 }),
        `Empty: leave it as it is (${rate(throttle)})`),
    ],
    "Start moves",
    async (data) => {
      const plan = parsePlan(data.plan);
      if (data.throttle) await setThrottle(Number(data.throttle));
      try {
        return await api("POST", REASSIGNMENTS, plan);
      } catch (error) {
        if (data.throttle) await setThrottle(throttle).catch(() => {}); // the refusal is what counts
        throw error;
      }
    },
    (answer) =>
      answer.reassignments.length
        ? refresh()
        : h("p", { class: "note" }, "Nothing started: every partition of the plan is on its replicas already."),
  );
}

/** The throttle's own form, while moves run or one is set: it applies at once, empty lifts it. */
function throttleForm(throttle) {
  return form(
    "Reassignment throttle",
    [field("Bytes/s per node", h("input", { id: "throttle-rate", name: "rate", type: "number", min: 1, value: throttle, placeholder: "none" }),
      "What each node may send to the replicas moves add; empty: no throttle")],
    "Set throttle",
    (data) => setThrottle(data.rate ? Number(data.rate) : null),
    refresh,
  );
}

/** The moves in progress, each cancellable, with the forms that start moves and throttle them
 * (`alters`: for a principal with ALTER on the cluster; the others see the moves only). */
function movesSection(moving, multi, alters) {
  const status = h("div", { class: "status", "aria-live": "polite" });
  const moves = moving.reassignments;
  const cancel = (m) =>
    confirmed({ "aria-label": `Cancel the move of ${m.topic} partition ${m.partition}` }, "Cancel", status,
      [`Put ${m.topic} partition ${m.partition} back on its original replicas? The copies made so far are deleted.`, "Put back"],
      () => api("DELETE", path(REASSIGNMENTS, m.topic, m.partition)));
  return [
    h("h2", {}, "Moves in progress"),
    moves.length
      ? table(
          `Partitions moving to new replicas (throttle: ${rate(moving.throttle_bytes_per_second)})`,
          [
            ["Topic", (m) => link(path("/topics", m.topic), m.topic)],
            ["Partition", (m) => m.partition],
            ["Target", (m) => m.replicas.join(", ")],
            ["Adding", (m) => m.adding.join(", ") || "—"],
            ["Removing", (m) => m.removing.join(", ") || "—"],
            ["Copied", (m) => copied(m)],
            ...(alters ? [["", cancel]] : []),
          ],
          moves,
        )
      : h("p", { class: "ok" }, "None: no partition is moving."),
    moves.length && alters
      ? confirmed({ class: "danger", id: "cancel-all-moves" }, "Cancel all moves", status,
          [`${moves.length === 1 ? "Put the moving partition back on its" : `Put all ${moves.length} moving partitions back on their`} original replicas? The copies made so far are deleted.`, "Put all back"],
          () => api("DELETE", REASSIGNMENTS))
      : null,
    status,
    alters && multi && (moves.length || moving.throttle_bytes_per_second !== null)
      ? throttleForm(moving.throttle_bytes_per_second)
      : null,
    alters && multi ? moveForm(moving.throttle_bytes_per_second) : null,
  ];
}

/** A share of the mean as a percentage: 0.1 -> "10%". */
const percent = (ratio) => `${Math.round(ratio * 100)}%`;

/** A plan as the node answered it: what moves, how many bytes, what it could not meet, and
 * each node's figures before and after (the operator judges it before it starts). */
function planView(plan) {
  const shown = plan.moves.slice(0, PLAN_ROWS);
  const span = (before, after) => (before === after ? String(after) : `${before} → ${after}`);
  return h(
    "div",
    {},
    facts([
      ["Partitions copied", plan.partitions_moved],
      ["Replicas added", `${plan.replica_moves} (as many removed)`],
      ["Bytes to copy", bytes(plan.bytes_to_move)],
      ["Leaders changed", `${plan.leadership_changes} (replica order only: nothing copied)`],
      ["Goal", plan.goal_met ? `met: every node ends within ±${percent(plan.tolerance)} of the mean` : "not met: see the notes"],
    ]),
    plan.notes.length ? h("ul", { class: "notes" }, plan.notes.map((note) => h("li", {}, note))) : null,
    plan.skipped.length
      ? h("p", { class: "bad" }, "Left as they are, every replica lost: ",
          plan.skipped.map((p) => `${p.topic} partition ${p.partition}`).join(", "))
      : null,
    plan.moves.length
      ? table(
          `${plural(plan.moves.length, "partition changes", "partitions change")}${plan.moves.length > shown.length ? ` (the first ${shown.length} listed)` : ""}`,
          [
            ["Topic", (m) => link(path("/topics", m.topic), m.topic)],
            ["Partition", (m) => m.partition],
            ["Replicas now", (m) => m.from.join(", ")],
            ["Replicas after", (m) => m.replicas.join(", ")],
          ],
          shown,
        )
      : h("p", { class: "ok" }, "Nothing to move."),
    table(
      "Each node before → after",
      [
        ["Node", (n) => `node ${n.node_id}`],
        ["Replicas", (n) => span(n.replicas_before, n.replicas_after)],
        ["Preferred leader of", (n) => span(n.leaders_before, n.leaders_after)],
        ["Bytes", (n) => (n.bytes_before === n.bytes_after ? bytes(n.bytes_after) : `${bytes(n.bytes_before)} → ${bytes(n.bytes_after)}`)],
      ],
      plan.nodes,
    ),
  );
}

/**
 * Ask `route` for a dry run and show its plan in `panel`, with a button (`apply`) that starts
 * it for real: behind `question` (confirm()'s [question, action, typed]) when there is one.
 * `idle`: what to say instead when the plan moves nothing (a balance then has nothing to do;
 * a node's plan still marks the node).
 */
async function preview(panel, { title, route, apply, question, idle }) {
  const head = h("h3", { tabindex: "-1" }, title);
  panel.replaceChildren(head, h("p", {}, "Planning…"));
  try {
    const plan = await api("POST", `${route}?dry_run=true`);
    const status = h("div", { class: "status", "aria-live": "polite" });
    const start = async () => {
      status.replaceChildren();
      if (question && !(await confirm(...question))) return;
      try {
        await api("POST", route);
        refresh();
      } catch (error) {
        status.replaceChildren(problem(error));
      }
    };
    panel.replaceChildren(
      head,
      h("p", {}, "A dry run: nothing moves until you apply it. The node plans again when you do, from the cluster as it is then."),
      planView(plan),
      idle && !plan.moves.length
        ? h("p", { class: "ok" }, idle)
        : h("button", { type: "button", class: question ? "danger" : null, id: "apply-plan", onclick: start }, apply),
      h("button", { type: "button", onclick: () => panel.replaceChildren() }, "Close"),
      status,
    );
  } catch (error) {
    panel.replaceChildren(head, problem(error));
  }
  head.focus();
}

/** What can be done to a node from its row: decommission one in service (while another is
 * left to take its replicas), remove one that is down; nothing to a removed one. */
function nodeActions(node, nodes, panel) {
  const id = node.node_id;
  const route = path("/v1/cluster/nodes", id);
  if (node.state === "removed") return "—";
  if (!node.alive) {
    return h("button", {
      type: "button", class: "danger", id: `remove-node-${id}`,
      onclick: () => preview(panel, {
        title: `Remove node ${id}: its replicas re-created on the others`,
        route: `${route}/remove`,
        apply: `Remove node ${id}…`,
        question: [`Remove node ${id} for good? It is given no replica again; its partitions get new replicas on the nodes in service.`, "Remove", `node ${id}`],
      }),
    }, "Remove…");
  }
  if (node.state || inService(nodes).length < 2) return "—";
  return h("button", {
    type: "button", class: "danger", id: `decommission-node-${id}`,
    onclick: () => preview(panel, {
      title: `Decommission node ${id}: every replica moved off it`,
      route: `${route}/decommission`,
      apply: `Decommission node ${id}…`,
      question: [`Decommission node ${id}? Its replicas move to the other nodes; it keeps serving meanwhile and is marked removed once it holds none.`, "Decommission"],
    }),
  }, "Decommission…");
}

/** The nodes, each with its actions (none on a single node: there is nowhere to move to; none
 * without ALTER on the cluster). */
function nodesTable(cluster, led, panel, alters) {
  const columns = [
    ["Node", (n) => `node ${n.node_id}`],
    ["State", (n) => h("span", { class: n.alive ? "ok" : "bad" }, n.alive ? "alive" : "down")],
    ["Role", (n) => (n.node_id === cluster.controller ? "controller" : "broker")],
    ["URL", (n) => h("a", { href: `${n.url}/console` }, n.url)],
    ["Partitions led", (n) => led.get(n.node_id) ?? 0],
    ["Rack", (n) => n.rack ?? "—"],
    ["Service", (n) => (n.shutting_down ? "shutting down" : (n.state ?? "in service"))],
  ];
  if (alters && cluster.nodes.length > 1) columns.push(["Actions", (n) => nodeActions(n, cluster.nodes, panel)]);
  return table("Nodes", columns, cluster.nodes);
}

/** The balance button and the panel where plans (balance, decommission, remove) show. */
function planSection(cluster, panel) {
  const serving = inService(cluster.nodes).length;
  return [
    h("h2", {}, "Balance and decommission"),
    h("p", {}, "A balance evens replicas, preferred leaders and bytes over the nodes in service; " +
      "a node's row decommissions it (its replicas move off, then it is marked removed) or, when it is down, " +
      "removes it (its replicas are re-created on the others). Each shows the node's plan before anything moves."),
    serving > 1
      ? h("button", {
          type: "button", id: "plan-balance",
          onclick: () => preview(panel, {
            title: "Balance: the plan", route: "/v1/cluster/balance", apply: "Apply",
            idle: "The nodes are balanced already: nothing to apply.",
          }),
        }, "Plan a balance")
      : h("p", { class: "note" }, `A balance needs two nodes in service or more (now: ${serving}).`),
    panel,
  ];
}

export async function page(_params, _query, signal, me) {
  if (!me.cluster_authorized_operations.includes("describe")) throw notAllowed(me, "describe the cluster");
  const [cluster, topics, moving] = await Promise.all([
    describe("/v1/cluster", signal),
    describeAll(signal),
    get(REASSIGNMENTS, signal),
  ]);
  const alters = cluster.authorized_operations.includes("alter");
  const led = new Map(cluster.nodes.map((n) => [n.node_id, 0]));
  const under = [];
  const offline = [];
  for (const topic of topics) {
    for (const p of topic.partitions) {
      if (p.leader !== null) led.set(p.leader, (led.get(p.leader) ?? 0) + 1);
      const row = { topic: topic.name, ...p };
      if (p.leader === null || p.offline_replicas.length) offline.push(row);
      else if (p.isr.length < p.replicas.length) under.push(row);
    }
  }
  const single = cluster.nodes.length === 1;
  const panel = h("div", { id: "plan", "aria-live": "polite" });
  const partitionColumns = [
    ["Topic", (r) => link(path("/topics", r.topic), r.topic)],
    ["Partition", (r) => r.partition],
    ["Leader", (r) => r.leader ?? "none"],
    ["Replicas", (r) => r.replicas.join(", ")],
    ["In sync", (r) => r.isr.join(", ")],
    ["Eligible leaders", (r) => r.eligible_leader_replicas.join(", ") || "—"],
    ["Offline replicas", (r) => r.offline_replicas.join(", ") || "—"],
  ];
  return h(
    "section",
    {},
    heading("Cluster"),
    facts([
      ["Cluster id", h("code", {}, cluster.cluster_id)],
      ["Controller", cluster.controller === null ? "none elected" : `node ${cluster.controller}`],
      ["Nodes", `${cluster.nodes.filter((n) => n.alive).length} alive of ${cluster.nodes.length}`],
    ]),
    single
      ? h(
          "p",
          { class: "note" },
          "A single node: it leads every partition and keeps the only replica, so there is nothing to move, " +
            "balance or decommission. To try replication, run a three-node cluster on this machine: sluice dev-cluster.",
        )
      : null,
    single || alters
      ? null
      : h("p", { class: "note", id: "no-alter" }, "You may not move partitions, balance or decommission nodes: that needs ALTER on the cluster."),
    nodesTable(cluster, led, panel, alters),
    single || !alters ? null : planSection(cluster, panel),
    movesSection(moving, !single, alters),
    h("h2", {}, "Under-replicated partitions"),
    under.length
      ? table("Partitions whose in-sync replicas are fewer than their replicas", partitionColumns, under)
      : h("p", { class: "ok" }, single ? "None: a single node has nothing to replicate." : "None: every replica is in sync."),
    h("h2", {}, "Offline partitions"),
    offline.length
      ? table("Partitions without a leader or with a replica offline", partitionColumns, offline)
      : h("p", { class: "ok" }, "None: every partition has a leader."),
    topics.length ? null : empty("No topics yet.", null),
  );
}
