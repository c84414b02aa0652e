// Cluster: the nodes (alive, controller, rack, URL), the partitions each leads, the partition
// moves in progress with the bytes copied, and the partitions that are under-replicated or
// offline.

import { get, path } from "./api.js";
import { bytes, empty, facts, h, heading, link, table } from "./ui.js";

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

export async function page(_params, _query, signal) {
  const [cluster, topics, moving] = await Promise.all([
    get("/v1/cluster", signal),
    describeAll(signal),
    get("/v1/cluster/reassignments", signal),
  ]);
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
  const partitionColumns = [
    ["Topic", (r) => link(path("/topics", r.topic), r.topic)],
    ["Partition", (r) => r.partition],
    ["Leader", (r) => r.leader ?? "none"],
    ["Replicas", (r) => r.replicas.join(", ")],
    ["In sync", (r) => r.isr.join(", ")],
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
          "A single node: it leads every partition and keeps the only replica. " +
            "To try replication, run a three-node cluster on this machine: sluice dev-cluster.",
        )
      : null,
    table(
      "Nodes",
      [
        ["Node", (n) => `node ${n.node_id}`],
        ["State", (n) => h("span", { class: n.alive ? "ok" : "bad" }, n.alive ? "alive" : "down")],
        ["Role", (n) => (n.node_id === cluster.controller ? "controller" : "broker")],
        ["URL", (n) => h("a", { href: `${n.url}/console` }, n.url)],
        ["Partitions led", (n) => led.get(n.node_id) ?? 0],
        ["Rack", (n) => n.rack ?? "—"],
        ["Service", (n) => (n.shutting_down ? "shutting down" : (n.state ?? "in service"))],
      ],
      cluster.nodes,
    ),
    h("h2", {}, "Moves in progress"),
    moving.reassignments.length
      ? table(
          `Partitions moving to new replicas (throttle: ${
            moving.throttle_bytes_per_second === null ? "none" : `${bytes(moving.throttle_bytes_per_second)}/s per node`
          })`,
          [
            ["Topic", (m) => link(path("/topics", m.topic), m.topic)],
            ["Partition", (m) => m.partition],
            ["Target", (m) => m.replicas.join(", ")],
            ["Adding", (m) => m.adding.join(", ") || "—"],
            ["Removing", (m) => m.removing.join(", ") || "—"],
            ["Copied", (m) => copied(m)],
          ],
          moving.reassignments,
        )
      : h("p", { class: "ok" }, "None: no partition is moving."),
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
