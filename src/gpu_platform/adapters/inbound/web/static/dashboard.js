// Follows a job's log: streams GET <data-follow> (text/plain, chunked) into the <pre>.
// The only script of the dashboard besides htmx; it needs no eval and no inline code.
"use strict";
async function follow(pre) {
  const status = document.getElementById("log-status");
  try {
    const response = await fetch(pre.dataset.follow, { credentials: "same-origin" });
    if (!response.ok) {
      if (status) status.textContent = "(log unavailable: HTTP " + response.status + ")";
      return;
    }
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      const atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
      pre.textContent += decoder.decode(value, { stream: true });
      if (atEnd) pre.scrollTop = pre.scrollHeight;
    }
    if (status) status.textContent = "(attempt " + (response.headers.get("X-Attempt") || "–") + " ended)";
  } catch (err) {
    if (status) status.textContent = "(log stream interrupted: " + err + ")";
  }
}
document.addEventListener("DOMContentLoaded", function () {
  document.querySelectorAll("pre[data-follow]").forEach(follow);
});
