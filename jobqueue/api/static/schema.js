// Swagger UI's start-up for /schema, in a file of its own: the page's policy runs no inline
// script (jobqueue/api/security.py). The schema is fetched from this API, as the page's links are.
"use strict";

window.ui = SwaggerUIBundle({
  url: "/schema/openapi.json",
  dom_id: "#swagger-container",
  deepLinking: true,
  showExtensions: true,
  showCommonExtensions: true,
  presets: [SwaggerUIBundle.presets.apis, SwaggerUIBundle.SwaggerUIStandalonePreset],
});
