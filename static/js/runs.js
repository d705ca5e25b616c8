// Runs table: remember the column picker's choice in this browser, and keep the runs ticked for comparison across
// pages, sorts and filters (localStorage, per project). No inline script: loaded from runs.html (CSP script-src 'self').
(function () {
  "use strict";
  const form = document.getElementById("runs-filter");
  const compare = document.getElementById("compare-form");
  if (!form || !compare) return;
  const project = location.pathname.split("/")[2] || "";
  const colsKey = "runs-cols:" + project, pickKey = "runs-picked:" + project;
  const store = {
    get(key, fallback) { try { return JSON.parse(localStorage.getItem(key)) || fallback; } catch (e) { return fallback; } },
    set(key, value) { try { localStorage.setItem(key, JSON.stringify(value)); } catch (e) { /* private mode */ } },
  };

  // Columns: the address wins; without ?cols= the last choice made in this browser is applied.
  const params = new URLSearchParams(location.search);
  const saved = store.get(colsKey, null);
  if (!params.has("cols") && Array.isArray(saved) && saved.length && !params.has("format")) {
    saved.forEach((c) => params.append("cols", c));
    location.replace("?" + params.toString());
    return;
  }
  form.addEventListener("submit", () => {
    store.set(colsKey, Array.from(form.querySelectorAll('input[name="cols"]:checked')).map((i) => i.value));
  });

  // Compare selection: every ticked certificate id, whatever page it was ticked on.
  const picked = store.get(pickKey, []);
  const status = document.createElement("span");
  status.className = "muted small";
  status.id = "compare-count";
  status.setAttribute("aria-live", "polite");
  const clear = document.createElement("button");
  clear.type = "button";
  clear.className = "btn small secondary";
  clear.id = "compare-clear";
  clear.textContent = "Clear selection";
  compare.append(" ", status, " ", clear);
  const boxes = () => Array.from(document.querySelectorAll('input[name="c"][form="compare-form"]'));
  function render() {
    boxes().forEach((b) => { b.checked = picked.includes(b.value); });
    compare.querySelectorAll("input.carried").forEach((i) => i.remove());
    picked.filter((id) => !boxes().some((b) => b.value === id)).forEach((id) => {
      const hidden = document.createElement("input");
      hidden.type = "hidden"; hidden.name = "c"; hidden.value = id; hidden.className = "carried";
      compare.append(hidden);
    });
    status.textContent = picked.length ? picked.length + " selected" : "";
    clear.hidden = !picked.length;
    store.set(pickKey, picked);
  }
  boxes().forEach((b) => b.addEventListener("change", () => {
    const at = picked.indexOf(b.value);
    if (b.checked && at < 0) picked.push(b.value);
    if (!b.checked && at >= 0) picked.splice(at, 1);
    render();
  }));
  clear.addEventListener("click", () => { picked.splice(0, picked.length); render(); });
  render();
})();
