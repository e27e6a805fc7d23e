// The page of `nmt serve`: POST /translate (n-best) and POST /attention (heatmap), no libraries.
"use strict";
const $ = (id) => document.getElementById(id);
let attention = null;

function headers() {
  const h = { "Content-Type": "application/json" };
  const key = $("key").value.trim();
  if (key) h["Authorization"] = "Bearer " + key;
  return h;
}

async function post(path, body) {
  const r = await fetch(path, { method: "POST", headers: headers(), body: JSON.stringify(body) });
  const data = await r.json();
  if (!r.ok) throw new Error(data.error ? data.error.message : "HTTP " + r.status);
  return data;
}

function fillSelect(select, labels) {
  const old = select.value;
  select.innerHTML = "";
  labels.forEach((label, i) => {
    const o = document.createElement("option");
    o.value = String(i); o.textContent = label; select.appendChild(o);
  });
  if ([...select.options].some((o) => o.value === old)) select.value = old;
}

function weights() {
  const layer = attention.cross[Number($("layer").value)];
  const head = $("head").value;
  if (head !== "mean") return layer[Number(head)];
  return layer[0].map((row, t) => row.map((_, s) => layer.reduce((a, h) => a + h[t][s], 0) / layer.length));
}

function draw() {
  const canvas = $("heatmap");
  if (!attention || attention.cross.length === 0) { canvas.width = canvas.height = 1; return; }
  const w = weights(), src = attention.source_pieces, tgt = attention.target_pieces;
  const ctx = canvas.getContext("2d");
  const font = "12px system-ui, sans-serif";
  ctx.font = font;
  const width = (list) => Math.max(...list.map((p) => ctx.measureText(p).width));
  const cell = Math.max(14, Math.min(28, Math.floor((Math.min(window.innerWidth, 900) - 60 - width(tgt)) / src.length)));
  const left = Math.ceil(width(tgt)) + 8, top = Math.ceil(width(src)) + 8;
  const ratio = window.devicePixelRatio || 1;
  canvas.width = (left + cell * src.length + 4) * ratio;
  canvas.height = (top + cell * tgt.length + 4) * ratio;
  canvas.style.width = canvas.width / ratio + "px";
  canvas.style.height = canvas.height / ratio + "px";
  ctx.scale(ratio, ratio);
  ctx.font = font;
  ctx.fillStyle = "#fff"; ctx.fillRect(0, 0, canvas.width, canvas.height);
  for (let t = 0; t < tgt.length; t++) {
    for (let s = 0; s < src.length; s++) {
      const v = w[t][s];
      const c = Math.round(255 - 215 * v);
      ctx.fillStyle = `rgb(${c}, ${Math.round(255 - 170 * v)}, 255)`;
      ctx.fillRect(left + s * cell, top + t * cell, cell - 1, cell - 1);
    }
  }
  ctx.fillStyle = "#1d2330"; ctx.textBaseline = "middle"; ctx.textAlign = "right";
  tgt.forEach((p, t) => ctx.fillText(p, left - 4, top + t * cell + cell / 2));
  src.forEach((p, s) => {
    ctx.save(); ctx.translate(left + s * cell + cell / 2, top - 4); ctx.rotate(-Math.PI / 2);
    ctx.textAlign = "left"; ctx.fillText(p, 0, 0); ctx.restore();
  });
  canvas.dataset.drawn = String(src.length * tgt.length);
}

async function translate(event) {
  event.preventDefault();
  const text = $("source").value.trim();
  if (!text) return;
  const model = $("model").value, beam = Number($("beam").value) || 4, format = $("format").value;
  // a paragraph or markup: its sentences translated and joined (nmt.realtext.job), one output
  const whole = format !== "text" || text.includes("\n") || /[.!?]\s+\S/.test(text);
  const nbest = whole ? 1 : Math.min(Number($("nbest").value) || 1, beam);
  $("go").disabled = true; $("status").className = ""; $("status").textContent = "translating...";
  $("heatmap").dataset.drawn = "";
  try {
    const [tr, att] = await Promise.all([
      post("/translate", { model, text, beam, nbest, format }),
      // an engine without attention maps (--engine ctranslate2) answers 400: translate without a heatmap
      whole ? { cross: [], source_pieces: [], target_pieces: [], missing: "one sentence at a time" }
        : post("/attention", { model, text, beam })
          .catch((e) => ({ cross: [], source_pieces: [], target_pieces: [], missing: e.message })),
    ]);
    const best = tr.translations[0];
    showTranslation(best);
    $("nbestlist").innerHTML = "";
    best.nbest.forEach((h) => {
      const li = document.createElement("li");
      li.textContent = h.text;
      const sc = document.createElement("span"); sc.className = "score"; sc.textContent = h.score.toFixed(3);
      li.appendChild(sc); $("nbestlist").appendChild(li);
    });
    const first = attention === null;
    attention = att;
    fillSelect($("layer"), att.cross.map((_, i) => String(i + 1)));
    if (first && att.cross.length) $("layer").value = String(att.cross.length - 1);
    const heads = att.cross.length ? att.cross[0].map((_, i) => String(i + 1)) : [];
    fillSelect($("head"), heads);
    const mean = document.createElement("option"); mean.value = "mean"; mean.textContent = "mean";
    $("head").appendChild(mean);
    $("result").hidden = false;
    draw();
    const trust = [];
    if (best.flags && best.flags.length) trust.push("flagged: " + best.flags.join(", "));
    if (best.restored && best.restored.length) trust.push("put back: " + best.restored.join(" "));
    $("status").textContent = [att.missing ? "no heatmap: " + att.missing : "", ...trust, ...(tr.warnings || [])]
      .filter(Boolean).join("; ");
  } catch (e) {
    $("status").className = "error"; $("status").textContent = e.message;
  } finally {
    $("go").disabled = false;
  }
}

// a dropped .txt, .md or .html file: its text in the box, the format from its name
async function dropFile(event) {
  const file = event.dataTransfer.files[0];
  if (!file) return;
  event.preventDefault();
  $("source").value = await file.text();
  $("format").value = /\.html?$/i.test(file.name) ? "html" : /\.xml$/i.test(file.name) ? "xml" : "text";
  $("status").className = ""; $("status").textContent = file.name + ": " + file.size + " bytes";
}

async function init() {
  const r = await fetch("/health");
  const health = await r.json();
  if (!r.ok) {  // 503: a model's worker is dead or stuck (the message says which)
    $("status").className = "error";
    $("status").textContent = health.error ? health.error.message : "HTTP " + r.status;
    return;
  }
  fillSelect($("model"), health.models);
  [...$("model").options].forEach((o, i) => { o.value = health.models[i]; });
  $("keyrow").hidden = !health.auth;
  $("form").addEventListener("submit", translate);
  $("source").addEventListener("dragover", (e) => e.preventDefault());
  $("source").addEventListener("drop", dropFile);
  $("layer").addEventListener("change", draw);
  $("head").addEventListener("change", draw);
  window.addEventListener("resize", draw);
}
init();

// the translation with its low-confidence words marked (confidence under LOW_WORD), and the
// translation's confidence beside it
const LOW_WORD = 0.3;
function showTranslation(best) {
  const out = $("translation");
  out.textContent = "";
  let at = 0;
  for (const w of best.words || []) {
    if (w.start === null || w.start < at || w.confidence >= LOW_WORD) continue;
    out.appendChild(document.createTextNode(best.text.slice(at, w.start)));
    const mark = document.createElement("mark");
    mark.className = "low"; mark.title = "confidence " + w.confidence.toFixed(2);
    mark.textContent = best.text.slice(w.start, w.end);
    out.appendChild(mark);
    at = w.end;
  }
  out.appendChild(document.createTextNode(best.text.slice(at)));
  $("confidence").textContent = best.confidence === null || best.confidence === undefined
    ? "" : "confidence " + best.confidence.toFixed(2);
}
