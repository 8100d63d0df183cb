// The live page of `memvisor host`: polls the host API (read-only, under /api) every second and
// draws, with uPlot, the free memory and its state, the budget split, and for each VM its
// memory stacked by where it is (resident, balloon, swapped, on disk) with its target, its
// active estimate and the host memory its pool holds (MemFlex); the budget split counts the
// pools' memory too, and each VM's share of it is what it really holds: its resident memory less
// what its page sharing (KSM) saves, drawn as its own line. Each chart's section carries data-points (and each VM's data-state), so a
// headless browser can check what the page shows.
"use strict";

const MIB = 1 << 20;
const STATES = ["high", "soft", "hard", "low"];
const COLORS = ["#1565c0", "#2e7d32", "#ef6c00", "#6a1b9a", "#00838f", "#ad1457", "#558b2f", "#4e342e"];
const host = { since: 0, eventsSince: 0, t: [], free: [], level: [], pools: [], budget: 0, split: {}, charts: {} };
const vms = new Map();

const mib = (v) => v == null ? "-" : (v / MIB).toFixed(0) + " MiB";
const width = (el) => Math.max(320, el.clientWidth - 10);

function stackedChart(el, layers, lines, yLabel) {
  // layers: [{label, color}] bottom first; drawn as cumulative sums, top first, each filled.
  const series = [{ label: "s" }];
  for (let i = layers.length - 1; i >= 0; i--) {
    const l = layers[i];
    series.push({ label: l.label, stroke: l.color, fill: l.color, width: 1,
      value: (u, v, si, idx) => mib(u.raw && u.raw[i] ? u.raw[i][idx] : null) });
  }
  for (const l of lines) {
    series.push({ label: l.label, stroke: l.color, width: 2, dash: l.dash, value: (u, v) => mib(v) });
  }
  return new uPlot({
    width: width(el), height: 220, series,
    scales: { x: { time: false } },
    axes: [{ label: "seconds" }, { label: yLabel, size: 70, values: (u, vals) => vals.map(v => (v / MIB).toFixed(0) + "M") }],
  }, [[], ...series.slice(1).map(() => [])], el);
}

/// Cumulative sums of `raw` (bottom first), in the chart's series order (top first).
function stack(raw) {
  const out = [];
  let acc = raw[0].map(() => 0);
  const cum = raw.map(r => (acc = acc.map((a, i) => a + (r[i] || 0))));
  for (let i = cum.length - 1; i >= 0; i--) out.push(cum[i]);
  return out;
}

function vmEntry(name) {
  let v = vms.get(name);
  if (v) return v;
  const sec = document.createElement("section");
  sec.className = "vm";
  sec.id = "vm-" + name;
  sec.dataset.points = "0";
  sec.innerHTML = `<h2>${name} <span class="state">?</span></h2><div class="why"></div><div class="chart"></div>`;
  document.getElementById("vms").appendChild(sec);
  const chart = stackedChart(sec.querySelector(".chart"), [
    { label: "resident", color: "#1565c0" },
    { label: "balloon", color: "#2e7d32" },
    { label: "swapped", color: "#ef6c00" },
    { label: "on disk", color: "#8d6e63" },
  ], [
    { label: "target", color: "#000000", dash: [6, 4] },
    { label: "active", color: "#c62828" },
    { label: "pool (host memory)", color: "#00838f", dash: [2, 2] },
    { label: "saved by sharing", color: "#6a1b9a", dash: [8, 3] },
  ], "bytes");
  v = { sec, chart, t: [], resident: [], balloon: [], swapped: [], ondisk: [], target: [], active: [], pool: [], shared: [] };
  vms.set(name, v);
  return v;
}

function drawVm(v) {
  const raw = [v.resident, v.balloon, v.swapped, v.ondisk];
  v.chart.raw = raw;
  v.chart.setData([v.t, ...stack(raw), v.target, v.active, v.pool, v.shared]);
  v.sec.dataset.points = String(v.t.length);
}

function drawHost() {
  if (!host.charts.free) {
    host.charts.free = new uPlot({
      width: width(document.getElementById("host-free")), height: 220,
      series: [{ label: "s" },
        { label: "free", stroke: "#1565c0", width: 2, fill: "#1565c022", value: (u, v) => mib(v) },
        { label: "state", stroke: "#c62828", width: 2, scale: "state", paths: uPlot.paths.stepped({ align: 1 }),
          value: (u, v) => v == null ? "-" : STATES[v] }],
      scales: { x: { time: false }, state: { range: [0, 3] } },
      axes: [{ label: "seconds" }, { label: "free", size: 70, values: (u, vals) => vals.map(v => (v / MIB).toFixed(0) + "M") },
        { scale: "state", side: 1, values: (u, vals) => vals.map(v => STATES[v] || ""), grid: { show: false } }],
    }, [[], [], []], document.getElementById("host-free"));
  }
  host.charts.free.setData([host.t, host.free, host.level]);
  document.getElementById("host").dataset.points = String(host.t.length);
  const names = Object.keys(host.split).sort();
  if (!host.charts.split || host.charts.splitNames !== names.join(",")) {
    const el = document.getElementById("host-split");
    el.innerHTML = "";
    host.charts.split = stackedChart(el, [...names.map((n, i) => ({ label: n, color: COLORS[i % COLORS.length] })),
      { label: "pools", color: "#00838f" }, { label: "free", color: "#9e9e9e" }], [], "bytes");
    host.charts.splitNames = names.join(",");
  }
  const raw = [...names.map(n => host.split[n]), host.pools, host.free];
  host.charts.split.raw = raw;
  host.charts.split.setData([host.t, ...stack(raw)]);
  document.getElementById("split").dataset.points = String(host.t.length);
}

async function get(path) {
  const r = await fetch("/api" + path);
  if (!r.ok) throw new Error(path + ": " + r.status);
  return r.json();
}

async function poll() {
  try {
    const [info, list, history, events] = await Promise.all([
      get("/host"), get("/vms"), get("/history?since=" + host.since), get("/events?since=" + host.eventsSince)]);
    document.getElementById("budget").textContent = mib(info.budget_bytes);
    document.getElementById("free").textContent = mib(info.free_bytes);
    const fs = document.getElementById("free-state");
    fs.textContent = info.free_state;
    fs.className = "state " + info.free_state;
    document.getElementById("ksm").textContent = info.ksm
      ? `KSM ${info.ksm.pages_to_scan} pages / ${info.ksm.sleep_ms} ms, saved ${mib((info.ksm.sharing_pages + info.ksm.zero_pages) * 4096)}, ksmd ${(info.ksm.cpu_fraction * 100).toFixed(1)} %`
      : "";
    for (const s of history) {
      const i = host.t.length;
      host.t.push(s.seconds);
      host.free.push(s.free_bytes);
      host.level.push(STATES.indexOf(s.free_state));
      host.pools.push(s.vms.reduce((sum, m) => sum + (m.pooled_bytes || 0), 0));
      for (const name of Object.keys(host.split)) host.split[name].push(0);
      for (const m of s.vms) {
        if (!host.split[m.name]) host.split[m.name] = host.t.map(() => 0);
        host.split[m.name][i] = m.resident_bytes - (m.shared_saved_bytes || 0);
        const v = vmEntry(m.name);
        v.t.push(s.seconds);
        v.resident.push(m.resident_bytes);
        v.balloon.push(m.balloon_bytes);
        v.swapped.push(m.swapped_bytes);
        v.ondisk.push(m.on_disk_bytes);
        v.target.push(m.target_bytes);
        v.active.push(m.active_bytes);
        v.pool.push(m.pooled_bytes);
        v.shared.push(m.shared_saved_bytes || 0);
      }
      host.since = s.seconds;
    }
    for (const m of list) {
      const v = vmEntry(m.name);
      const badge = v.sec.querySelector(".state");
      badge.textContent = m.state;
      badge.className = "state " + m.state;
      v.sec.dataset.state = m.state;
      v.sec.querySelector(".why").textContent = m.why || "";
    }
    const rows = document.getElementById("event-rows");
    for (const e of events) {
      const tr = document.createElement("tr");
      tr.innerHTML = `<td>${e.seconds.toFixed(1)}</td><td>${e.vm || ""}</td><td></td>`;
      tr.lastChild.textContent = e.message;
      rows.insertBefore(tr, rows.firstChild);
      host.eventsSince = e.seconds;
    }
    drawHost();
    for (const v of vms.values()) drawVm(v);
    document.getElementById("conn").textContent = "";
  } catch (err) {
    const c = document.getElementById("conn");
    c.textContent = "the host does not answer: " + err.message;
    c.className = "err";
  }
  setTimeout(poll, 1000);
}

poll();
