// django-atp: refresh parts of a page in place, without a build step or a library.
// An element with data-atp-refresh="URL" gets its content replaced by the HTML the
// URL returns, every data-atp-interval milliseconds (default 3000), while the page is
// visible. It stops once the content it got holds an element with data-atp-final.
// A form with data-atp-confirm="question" is sent only once the user agrees.
(function () {
  "use strict";

  function poll(element) {
    var interval = parseInt(element.dataset.atpInterval || "3000", 10);
    function tick() {
      if (element.querySelector("[data-atp-final]")) {
        return;
      }
      if (document.hidden) {
        window.setTimeout(tick, interval);
        return;
      }
      fetch(element.dataset.atpRefresh, {credentials: "same-origin", headers: {"X-Requested-With": "fetch"}})
        .then(function (response) {
          if (response.redirected) {
            // Sent elsewhere (the session ended: a login page): not content to
            // show here. Reloading the page lets the site say what to do.
            window.location.reload();
            return false;
          }
          if (!response.ok) {
            throw new Error("HTTP " + response.status);
          }
          return response.text().then(function (html) {
            element.innerHTML = html;
            return true;
          });
        })
        .catch(function () { return true; /* keep the last content; try again later */ })
        .then(function (again) {
          if (again) {
            window.setTimeout(tick, interval);
          }
        });
    }
    window.setTimeout(tick, interval);
  }

  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("[data-atp-refresh]").forEach(poll);
  });
  // On the document: forms refreshed in place are covered too.
  document.addEventListener("submit", function (event) {
    var question = event.target.dataset && event.target.dataset.atpConfirm;
    if (question && !window.confirm(question)) {
      event.preventDefault();
    }
  });
}());
