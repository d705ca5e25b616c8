// Drag-and-drop upload with a progress bar; posts multipart to the REST API with the session's CSRF token.
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

  function init(opts) {
    const zone = document.getElementById("dropzone"), input = document.getElementById("file-input");
    const status = document.getElementById("upload-status"), bar = document.getElementById("upload-bar");
    const pctEl = document.getElementById("upload-pct"), nameEl = document.getElementById("upload-name");
    const result = document.getElementById("upload-result");

    function send(file) {
      status.style.display = ""; nameEl.textContent = file.name + " (" + (file.size / 1048576).toFixed(1) + " MiB)";
      bar.style.width = "0%"; bar.parentElement.className = "progress"; result.innerHTML = "";
      const form = new FormData(); form.append("file", file, file.name);
      const xhr = new XMLHttpRequest();
      xhr.open("POST", opts.endpoint);
      xhr.setRequestHeader("X-CSRFToken", csrf());
      xhr.upload.onprogress = (e) => { if (e.lengthComputable) { const p = Math.round(100 * e.loaded / e.total); bar.style.width = p + "%"; pctEl.textContent = p + "%"; } };
      xhr.onload = () => {
        let body = {}; try { body = JSON.parse(xhr.responseText); } catch (e) { /* not JSON */ }
        if (xhr.status === 201 || xhr.status === 200) {
          bar.parentElement.className = "progress done"; pctEl.textContent = "100%";
          const dup = xhr.status === 200 ? '<div class="alert warn">This file was uploaded before; showing the first upload.</div>' : "";
          result.innerHTML = dup + '<div class="alert ok" id="upload-ok" data-upload-id="' + esc(body.id) + '">Stored <span class="mono">' + esc(body.sha256).slice(0, 12) +
            '</span> · <a href="' + esc(opts.uploadsPage + body.id + "/") + '">' + esc(body.original_name) + "</a> · stage " +
            '<span class="badge ' + esc(body.stage) + '" id="upload-stage" data-field="stage">' + esc(body.stage) + "</span>" +
            '<ul class="upload-jobs" id="upload-jobs"></ul></div>';
          follow(body);
          addRow(body);
        } else {
          bar.parentElement.className = "progress failed";
          const err = body.error || {code: "http_" + xhr.status, message: xhr.statusText || "upload failed"};
          const rows = ((err.detail && err.detail.errors) || []).slice(0, 10).map((e) => "<li>line " + esc(e.line) + (e.field ? " · " + esc(e.field) : "") + ": " + esc(e.reason) + "</li>").join("");
          result.innerHTML = '<div class="alert error" id="upload-error"><strong>' + esc(err.code) + ":</strong> " + esc(err.message) + (rows ? "<ul>" + rows + "</ul>" : "") + "</div>";
        }
      };
      xhr.onerror = () => { bar.parentElement.className = "progress failed"; result.innerHTML = '<div class="alert error" id="upload-error">Network error: the upload did not complete. Nothing was stored.</div>'; };
      xhr.send(form);
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
