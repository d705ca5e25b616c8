// Training-audit page while its job runs: live progress through LivePortal (websocket, polling fallback); once the
// job succeeds the page reloads to show the stored results.
(function () {
  "use strict";

  function follow(card, dot) {
    if (!card || !window.LivePortal) return;
    new MutationObserver(() => {
      if (card.dataset.state === "succeeded") location.reload();
    }).observe(card, {attributes: true, attributeFilter: ["data-state"]});
    LivePortal.job(card, dot);
  }

  window.TrainingPage = { follow };
})();
