// Drag-and-drop upload with a progress bar; posts multipart to the REST API with the session's CSRF token.
(function () {
  "use strict";
  function csrf() {
    const m = document.cookie.match(/(?:^|; )csrftoken=([^;]+)/);
    return m ? decodeURIComponent(m[1]) : "";
  }
  const esc = (s) => String(s == null ? "" : s).replace(/[&<>"']/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c]));

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
          const job = (body.jobs || [])[0];
          const dup = xhr.status === 200 ? '<div class="alert warn">This file was uploaded before; showing the first upload.</div>' : "";
          result.innerHTML = dup + '<div class="alert ok" id="upload-ok">Stored <span class="mono">' + esc(body.sha256).slice(0, 12) + '</span> · stage <strong>' + esc(body.stage) + '</strong>' +
            (job ? ' · <a id="upload-job-link" href="/jobs/' + job.id + '/">follow the validation job #' + job.id + '</a>' : "") + "</div>";
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
