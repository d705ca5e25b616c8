// Drag-and-drop upload with a progress bar, through the REST API with the session's CSRF token: one multipart POST
// for a small file, a resumable upload in parts above the page's data-parts-above (settings.UPLOAD_PARTS_ABOVE_BYTES).
(function () {
  "use strict";
  function csrf() {
    const m = document.cookie.match(/(?:^|; )csrftoken=([^;]+)/);
    return m ? decodeURIComponent(m[1]) : "";
  }
  const esc = (s) => String(s == null ? "" : s).replace(/[&<>"']/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c]));

  // The banner follows the upload's jobs live (validation, then certificate and fidelity audit), each linked to its
  // page and, once finished, to what it produced.
  function follow(upload) {
    const list = document.getElementById("upload-jobs");
    const show = (j) => {
      if (j.subject_kind !== "upload" || Number(j.subject_id) !== Number(upload.id)) return;
      let li = list.querySelector('li[data-job-id="' + j.id + '"]');
      if (!li) {
        li = document.createElement("li"); li.dataset.jobId = j.id;
        const after = Array.from(list.children).find((x) => Number(x.dataset.jobId) > j.id);
        list.insertBefore(li, after || null);
      }
      li.dataset.kind = j.kind;
      li.innerHTML = '<a href="/jobs/' + j.id + '/">' + esc(j.title || j.kind) + "</a> " + LivePortal.stateHtml(j, "upload-product-" + j.kind) +
        (j.state === "running" ? ' <span class="muted">' + Math.round((j.progress || 0) * 100) + "%</span>" : "");
      if (j.kind === "validate_upload" && j.state === "succeeded" && j.result && j.result.stage) {
        const stage = document.getElementById("upload-stage");
        stage.textContent = j.result.stage === "invalid" ? j.outcome.text.replace(/^finished: /, "") : j.result.stage;
        stage.className = "badge " + j.result.stage;
      } else if (j.kind === "validate_upload" && j.state === "running") {
        const stage = document.getElementById("upload-stage"); stage.textContent = "processing"; stage.className = "badge processing";
      }
    };
    (upload.jobs || []).forEach((j) => show(Object.assign({subject_kind: "upload", subject_id: upload.id}, j)));
    LivePortal.onProjectJob(show);
  }

  // A new upload appears at the top of the table at once; its stage badge then follows the validation job.
  function addRow(upload) {
    const body = document.querySelector("#uploads-table tbody");
    if (!body || body.querySelector('tr[data-upload-id="' + upload.id + '"]')) return;
    const row = document.createElement("tr"); row.dataset.uploadId = upload.id;
    row.innerHTML = '<td><a href="' + esc(window.location.pathname + upload.id + "/") + '">' + esc(upload.original_name) + "</a></td>" +
      '<td><span class="badge ' + esc(upload.stage) + '" data-field="stage">' + esc(upload.stage) + "</span></td>" +
      '<td class="right">' + (upload.size_bytes / 1024).toFixed(1) + " KB</td>" + '<td class="mono">' + esc(upload.sha256).slice(0, 12) + "</td>" +
      '<td><span class="muted">—</span></td><td class="muted">' + esc(upload.submitted_by) + '</td><td class="muted">just now</td>';
    body.prepend(row);
    const total = document.getElementById("uploads-total");
    if (total) total.textContent = String(Number(total.textContent) + 1);
    const empty = document.getElementById("uploads-empty"); if (empty) empty.remove();
  }

  // One XMLHttpRequest as a promise: resolves {status, body, statusText} for any HTTP answer, rejects on a network error.
  function request(method, url, data, headers, onprogress) {
    return new Promise((resolve, reject) => {
      const xhr = new XMLHttpRequest();
      xhr.open(method, url);
      xhr.setRequestHeader("X-CSRFToken", csrf());
      Object.keys(headers || {}).forEach((k) => xhr.setRequestHeader(k, headers[k]));
      if (onprogress) xhr.upload.onprogress = (e) => onprogress(e.loaded);
      xhr.onload = () => {
        let body = {}; try { body = JSON.parse(xhr.responseText); } catch (e) { /* not JSON */ }
        resolve({status: xhr.status, body: body, statusText: xhr.statusText});
      };
      xhr.onerror = () => reject(new Error("network"));
      xhr.onabort = () => reject(new Error("network"));
      xhr.ontimeout = () => reject(new Error("network"));
      xhr.send(data == null ? null : data);
    });
  }
  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
  const RETRIES = 4, BACKOFF_MS = 400;  // a part (or the completion) is tried 5 times: 0.4, 0.8, 1.6, 3.2 s apart
  // Network errors, 5xx, 429 and a part that arrived damaged (part_digest_mismatch) are worth another try.
  const retryable = (r) => r.status >= 500 || r.status === 429 || (r.body.error && r.body.error.code === "part_digest_mismatch");
  async function withRetries(attempt) {
    for (let i = 0; ; i++) {
      let r = null;
      try { r = await attempt(); } catch (e) { r = null; }
      if (r && !retryable(r)) return r;
      if (i >= RETRIES) { if (r) return r; throw new Error("network"); }
      await sleep(BACKOFF_MS * Math.pow(2, i));
    }
  }
  async function partDigest(blob) {  // parts are small (16 MiB): hashed in memory; crypto.subtle needs a secure context
    if (!(window.crypto && crypto.subtle)) return null;
    const buf = await crypto.subtle.digest("SHA-256", await blob.arrayBuffer());
    return Array.from(new Uint8Array(buf), (b) => b.toString(16).padStart(2, "0")).join("");
  }

  function init(opts) {
    const zone = document.getElementById("dropzone"), input = document.getElementById("file-input");
    const status = document.getElementById("upload-status"), bar = document.getElementById("upload-bar");
    const pctEl = document.getElementById("upload-pct"), nameEl = document.getElementById("upload-name");
    const result = document.getElementById("upload-result");
    const partsAbove = Number(zone.dataset.partsAbove || 0);  // settings.UPLOAD_PARTS_ABOVE_BYTES

    function progress(loaded, total) {
      const p = total ? Math.min(100, Math.floor(100 * loaded / total)) : 0;
      bar.style.width = p + "%"; pctEl.textContent = p + "%";
    }
    // The run parameters and tags typed above the drop zone go, as typed, with either kind of upload; the server is
    // the one that checks them (audit_portal/runs/declarations.py) and a refusal names the field, shown on it.
    const configEl = document.getElementById("upload-config"), tagsEl = document.getElementById("upload-tags");
    const FIELD_LABELS = {config: "Run parameters (a JSON object)", tags: "Tags (comma-separated)"};
    function declared() {
      const out = {};
      if (configEl && configEl.value.trim()) out.config = configEl.value.trim();
      if (tagsEl && tagsEl.value.trim()) out.tags = tagsEl.value.trim();
      return out;
    }
    function markField(name) {
      [configEl, tagsEl].forEach((el) => { if (el) el.removeAttribute("aria-invalid"); });
      const el = name === "config" ? configEl : name === "tags" ? tagsEl : null;
      if (el) { el.setAttribute("aria-invalid", "true"); el.focus(); }
    }
    function showError(err) {
      bar.parentElement.className = "progress failed";
      const field = err.detail && err.detail.field;
      markField(field);
      if (FIELD_LABELS[field]) {  // a refused run parameter or tag: what to fix, in the field's own words
        result.innerHTML = '<div class="alert error" id="upload-error" data-field="' + esc(field) + '"><strong>' + esc(FIELD_LABELS[field]) + ":</strong> " +
          esc(String(err.message || "").replace(/^[a-z_]+: /, "")) + ". Nothing was stored; correct it and choose the file again.</div>";
        return;
      }
      const rows = ((err.detail && err.detail.errors) || []).slice(0, 10).map((e) => "<li>line " + esc(e.line) + (e.field ? " · " + esc(e.field) : "") + ": " + esc(e.reason) + "</li>").join("");
      result.innerHTML = '<div class="alert error" id="upload-error"><strong>' + esc(err.code) + ":</strong> " + esc(err.message) + (rows ? "<ul>" + rows + "</ul>" : "") + "</div>";
    }
    function showAnswer(r) {  // the upload endpoint's (or a session's completion's) answer
      const body = r.body;
      if (r.status === 201 || r.status === 200) {
        markField(null);
        bar.parentElement.className = "progress done"; pctEl.textContent = "100%"; bar.style.width = "100%";
        const nParams = Object.keys(body.config || {}).length, tags = body.tags || [];
        const declaredHtml = (nParams ? ' · <span id="upload-params">' + nParams + (nParams === 1 ? " parameter" : " parameters") + "</span>" : "") +
          (tags.length ? ' · tags <span id="upload-tags-sent">' + esc(tags.join(", ")) + "</span>" : "");
        const dup = r.status === 200 ? '<div class="alert warn">This file was uploaded before; showing the first upload.</div>' : "";
        result.innerHTML = dup + '<div class="alert ok" id="upload-ok" data-upload-id="' + esc(body.id) + '">Stored <span class="mono">' + esc(body.sha256).slice(0, 12) +
          '</span> · <a href="' + esc(opts.uploadsPage + body.id + "/") + '">' + esc(body.original_name) + "</a>" + declaredHtml + " · stage " +
          '<span class="badge ' + esc(body.stage) + '" id="upload-stage" data-field="stage">' + esc(body.stage) + "</span>" +
          '<ul class="upload-jobs" id="upload-jobs"></ul></div>';
        follow(body);
        addRow(body);
      } else {
        showError(body.error || {code: "http_" + r.status, message: r.statusText || "upload failed"});
      }
    }

    function sendWhole(file) {
      const form = new FormData(); form.append("file", file, file.name);
      const fields = declared(); Object.keys(fields).forEach((k) => form.append(k, fields[k]));
      request("POST", opts.endpoint, form, {}, (loaded) => progress(loaded, file.size)).then(showAnswer, () => {
        bar.parentElement.className = "progress failed";
        result.innerHTML = '<div class="alert error" id="upload-error">Network error: the upload did not complete. Nothing was stored.</div>';
      });
    }

    // A large file goes as a resumable upload session (audit_portal/runs/chunked.py): parts two at a time, each with
    // its SHA-256, retried with backoff; the session id is kept in localStorage under the file's name, size and
    // modification time, so choosing the same file again (after a reload or a lost network) sends only missing parts.
    async function sendInParts(file) {
      const key = "portal-upload:" + opts.sessionsEndpoint + ":" + file.name + ":" + file.size + ":" + file.lastModified;
      let session = null;
      const known = window.localStorage.getItem(key);
      if (known) {  // offline here: the caller says so, and the id is kept for the next try
        const r = await withRetries(() => request("GET", opts.sessionBase + encodeURIComponent(known) + "/"));
        if (r.status === 200 && r.body.state === "open" && r.body.size_bytes === file.size) session = r.body;
        else if (r.status === 200 || r.status === 404) window.localStorage.removeItem(key);  // finished or gone
        else { showAnswer(r); return; }
      }
      if (!session) {
        const r = await withRetries(() => request("POST", opts.sessionsEndpoint, JSON.stringify(Object.assign({size: file.size, name: file.name}, declared())),
                                                  {"Content-Type": "application/json"}));
        if (r.status === 400 && r.body.error && r.body.error.code === "too_many_upload_sessions") {
          nameEl.textContent += " · in one request (this project has too many unfinished uploads in parts)";
          status.dataset.mode = "whole";
          sendWhole(file);  // a single request still takes any size up to the upload limit, without resuming
          return;
        }
        if (r.status !== 201) { showAnswer(r); return; }
        session = r.body;
        window.localStorage.setItem(key, session.id);
      }
      status.dataset.sessionId = session.id;
      const sessionUrl = opts.sessionBase + session.id + "/";
      const size = session.part_size, count = session.part_count;
      const partLength = (n) => Math.min(size, file.size - n * size);
      let received = new Set(session.parts_received || []);
      if (received.size) nameEl.textContent += " · resuming: " + received.size + " of " + count + " parts stored";
      const inflight = {};
      const stored = () => Array.from(received).reduce((a, n) => a + partLength(n), 0);
      const show = () => progress(stored() + Object.values(inflight).reduce((a, b) => a + b, 0), file.size);
      show();

      async function sendParts() {
        const queue = []; for (let n = 0; n < count; n++) if (!received.has(n)) queue.push(n);
        let failure = null;
        async function worker() {
          while (queue.length && !failure) {
            const n = queue.shift();
            const blob = file.slice(n * size, n * size + partLength(n));
            const headers = {"Content-Type": "application/octet-stream"};
            const digest = await partDigest(blob);
            if (digest) headers["X-Part-SHA256"] = digest;
            let r;
            try {
              r = await withRetries(() => { inflight[n] = 0; return request("PUT", sessionUrl + "parts/" + n + "/", blob, headers, (l) => { inflight[n] = l; show(); }); });
            } catch (e) { r = null; }
            delete inflight[n];
            if (r && r.status === 200) { received.add(n); show(); } else if (!failure) { failure = r || "network"; }
          }
        }
        await Promise.all([worker(), worker()]);  // two parts at a time
        return failure;
      }

      for (let round = 0; round < 2; round++) {
        const failure = await sendParts();
        if (failure === "network") {
          bar.parentElement.className = "progress failed";
          result.innerHTML = '<div class="alert error" id="upload-error">Network error: ' + received.size + " of " + count +
            " parts are stored. Choose the same file again to resume with the others.</div>";
          return;
        }
        if (failure) { showAnswer(failure); return; }
        let r;
        try { r = await withRetries(() => request("POST", sessionUrl + "complete/")); } catch (e) { r = null; }
        if (!r) {
          bar.parentElement.className = "progress failed";
          result.innerHTML = '<div class="alert error" id="upload-error">Network error: every part is stored but the upload was not completed. Choose the same file again to finish it.</div>';
          return;
        }
        if (r.status === 400 && r.body.error && r.body.error.code === "parts_missing" && round === 0) {
          received = new Set((await request("GET", sessionUrl)).body.parts_received || []);  // the server's word
          continue;
        }
        if (r.status < 500 && !(r.body.error && r.body.error.code === "parts_missing")) window.localStorage.removeItem(key);  // closed
        showAnswer(r);
        return;
      }
    }

    function send(file) {
      status.style.display = ""; nameEl.textContent = file.name + " (" + (file.size / 1048576).toFixed(1) + " MiB)";
      bar.style.width = "0%"; pctEl.textContent = ""; bar.parentElement.className = "progress"; result.innerHTML = "";
      const inParts = partsAbove > 0 && file.size > partsAbove && opts.sessionsEndpoint;
      status.dataset.mode = inParts ? "parts" : "whole";
      if (!inParts) { sendWhole(file); return; }
      sendInParts(file).catch(() => {
        bar.parentElement.className = "progress failed";
        result.innerHTML = '<div class="alert error" id="upload-error">Network error: the upload did not complete. Choose the same file again to resume.</div>';
      });
    }
    zone.addEventListener("click", () => input.click());
    zone.addEventListener("keydown", (e) => { if (e.key === "Enter" || e.key === " ") input.click(); });
    input.addEventListener("change", () => { if (input.files[0]) send(input.files[0]); input.value = ""; });
    ["dragenter", "dragover"].forEach((t) => zone.addEventListener(t, (e) => { e.preventDefault(); zone.classList.add("over"); }));
    ["dragleave", "drop"].forEach((t) => zone.addEventListener(t, (e) => { e.preventDefault(); zone.classList.remove("over"); }));
    zone.addEventListener("drop", (e) => { const f = e.dataTransfer.files[0]; if (f) send(f); });
  }
  window.PortalUpload = { init };
})();
