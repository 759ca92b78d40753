// Starts Swagger UI on /api/schema (docs.html): a file rather than an inline script, so that the
// page's Content-Security-Policy admits scripts from Tally's origin only.
'use strict';
window.addEventListener('DOMContentLoaded', () => {
  window.ui = window.SwaggerUIBundle({
    url: document.body.dataset.openapi,
    dom_id: '#swagger-ui',
    // No deep links: they put a link inside each operation's button (two tab stops per operation,
    // a link nested in a button: axe-core's nested-interactive).
    deepLinking: false,
    // The default sends the document to validator.swagger.io for a badge: nothing leaves.
    validatorUrl: null,
    presets: [window.SwaggerUIBundle.presets.apis],
    layout: 'BaseLayout',
    docExpansion: 'list',
    defaultModelsExpandDepth: 0,
    // Swagger UI's server list is a select without a name: a screen reader said only "combo box".
    onComplete: () => {
      const servers = document.getElementById('servers');
      if (servers) servers.setAttribute('aria-label', 'Server');
    },
  });
});
