// The oracle audit page's one script (genEval/reports/audit.py inlines it; the page's CSP allows it by its sha256).
// It keeps the answers (sample id -> "same" | "changed" | "unsure") in the page, mirrors them to localStorage
// when the browser allows it, handles the keyboard, and offers the answers as a JSON download (a Blob URL).
"use strict";
(function () {
  const data = JSON.parse(document.getElementById("audit-data").textContent);
  const pairs = Array.from(document.querySelectorAll("section.pair"));
  const auditor = document.getElementById("auditor");
  const link = document.getElementById("download");
  const storeKey = "geneval-audit:" + data.run_id + ":" + data.seed + ":" + data.n;
  const keys = { "1": "same", s: "same", "2": "changed", c: "changed", "3": "unsure", u: "unsure" };
  const answers = {};
  let current = 0;
  let url = null;

  function payload() {
    const ordered = {};
    for (const sid of data.sample_ids) if (answers[sid]) ordered[sid] = answers[sid];
    return {
      kind: "geneval-oracle-audit-answers", schema_version: 1, run_id: data.run_id, run_dir: data.run_dir,
      seed: data.seed, n: data.n, display_width: data.display_width, sample_ids: data.sample_ids,
      answers: ordered, auditor: auditor.value.trim(), saved: new Date().toISOString(),
    };
  }

  function save() {
    try {
      localStorage.setItem(storeKey, JSON.stringify({ answers: answers, auditor: auditor.value }));
    } catch (e) { /* storage refused (private mode, file:// policy): the page state still holds the answers */ }
  }

  function restore() {
    let saved = null;
    try { saved = JSON.parse(localStorage.getItem(storeKey) || "null"); } catch (e) { saved = null; }
    if (!saved || typeof saved.answers !== "object") return;
    pairs.forEach(function (sec, i) {
      const value = saved.answers[sec.dataset.sid];
      if (data.answers.indexOf(value) >= 0) mark(i, value);
    });
    if (typeof saved.auditor === "string") auditor.value = saved.auditor;
  }

  function refresh() {
    const counts = { same: 0, changed: 0, unsure: 0 };
    for (const sid in answers) counts[answers[sid]] += 1;
    const done = counts.same + counts.changed + counts.unsure;
    document.getElementById("progress").textContent = done + " / " + pairs.length + " answered";
    document.getElementById("counts").textContent =
      "same " + counts.same + " · changed " + counts.changed + " · unsure " + counts.unsure;
  }

  function mark(i, value) {
    const sec = pairs[i];
    answers[sec.dataset.sid] = value;
    sec.querySelector('input[value="' + value + '"]').checked = true;
    sec.classList.remove("is-same", "is-changed", "is-unsure");
    sec.classList.add("is-" + value);
  }

  function answer(i, value) {
    mark(i, value);
    save();
    refresh();
  }

  function focus(i, scroll) {
    if (i < 0 || i >= pairs.length) return;
    pairs[current].classList.remove("current");
    current = i;
    pairs[i].classList.add("current");
    if (scroll) pairs[i].scrollIntoView({ block: "center" });
  }

  function nextOpen(from) {
    for (let k = 1; k <= pairs.length; k++) {
      const j = (from + k) % pairs.length;
      if (!answers[pairs[j].dataset.sid]) return j;
    }
    return Math.min(from + 1, pairs.length - 1);
  }

  pairs.forEach(function (sec, i) {
    sec.addEventListener("change", function (ev) {
      if (ev.target.type === "radio") answer(i, ev.target.value);
    });
    sec.addEventListener("click", function () { focus(i, false); });
  });

  document.addEventListener("keydown", function (ev) {
    if (ev.target === auditor || ev.ctrlKey || ev.metaKey || ev.altKey) return;
    const key = ev.key.toLowerCase();
    if (key in keys) {
      answer(current, keys[key]);
      focus(nextOpen(current), true);
    } else if (key === "j") {
      focus(current + 1, true);
    } else if (key === "k") {
      focus(current - 1, true);
    } else {
      return;
    }
    ev.preventDefault();
  });

  auditor.addEventListener("input", save);

  // The file is made when the link is clicked, so it carries the answers and the time of that moment.
  link.addEventListener("click", function () {
    if (url) URL.revokeObjectURL(url);
    url = URL.createObjectURL(new Blob([JSON.stringify(payload(), null, 2) + "\n"], { type: "application/json" }));
    link.href = url;
  });

  window.genevalAudit = { payload: payload, answer: answer };
  restore();
  focus(0, false);
  refresh();
})();
