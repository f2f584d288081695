"""The robot suite's web app (index.html, app.js) and its three.js install (:mod:`.assets`)."""
