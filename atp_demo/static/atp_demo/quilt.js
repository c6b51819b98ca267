// The quilt of the django-atp demo: asks for the batch's state every half second and
// colours each square whose task finished (red: failed), until the batch's on-complete
// task has ended; then the spinner stops. A static file: atp's pages run nothing inline.
(function () {
  "use strict";
  var INTERVAL_MS = 500;

  function draw(quilt, state) {
    quilt.querySelectorAll(".demo-square").forEach(function (square) {
      var task = state.squares[parseInt(square.dataset.square, 10)];
      if (!task) {
        return;
      }
      var status = task.status.toLowerCase();
      square.className = "demo-square demo-" + status;
      square.title = "square " + square.dataset.square + ": " + status;
      // Through the CSSOM, which the Content-Security-Policy allows (a style attribute it would not).
      square.style.backgroundColor = status === "finished" && task.colour ? task.colour : "";
      square.textContent = status === "failed" ? "\u2715" : "";
    });
    var summary = document.getElementById("quilt-summary");
    summary.textContent = state.coloured + " of " + state.squares.length + " squares coloured, " +
      state.failed + " failed" + (state.done ? "; the batch is complete." : "…");
    if (state.done) {
      document.getElementById("quilt-spinner").hidden = true;
      quilt.dataset.done = "true";
      var link = document.createElement("a");
      link.href = quilt.dataset.taskUrl.replace(/0\/$/, state.completion + "/");
      link.id = "quilt-completion";
      link.textContent = " Its on-complete task: #" + state.completion;
      summary.appendChild(link);
    }
  }

  function poll(quilt) {
    fetch(quilt.dataset.stateUrl, {credentials: "same-origin", headers: {"Accept": "application/json"}})
      .then(function (response) {
        if (!response.ok) {
          throw new Error("HTTP " + response.status);
        }
        return response.json();
      })
      .then(function (state) {
        draw(quilt, state);
        return !state.done;
      })
      .catch(function () { return true; /* keep what is drawn; try again */ })
      .then(function (again) {
        if (again) {
          window.setTimeout(function () { poll(quilt); }, INTERVAL_MS);
        }
      });
  }

  document.addEventListener("DOMContentLoaded", function () {
    var quilt = document.getElementById("quilt");
    if (quilt) {
      poll(quilt);
    }
  });
}());
