// The web console's HTML page: static markup with the accessible names that tests and assistive
// technology rely on (DESIGN.md "The web console"); src/console/main.ts fills it in. No inline
// script or style, so the Content-Security-Policy can forbid both.

export const CONSOLE_HTML = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>edgestr console</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="/console/console.css">
<script type="module" src="/console/console.js"></script>
</head>
<body>
<header class="top">
  <h1>edgestr console</h1>
  <div id="account" class="account" hidden>
    <span>Signed in as <code id="npub"></code></span>
    <button type="button" id="sign-out">Sign out</button>
  </div>
</header>
<p id="notice" class="notice" role="alert" hidden></p>
<main>
  <section id="signin" aria-labelledby="signin-title" hidden>
    <h2 id="signin-title">Sign in</h2>
    <p id="signin-hint">No NIP-07 extension was found: use a key kept in this browser.</p>
    <button type="button" id="use-nip07" hidden>Sign in with extension</button>
    <button type="button" id="use-local">Use a local key</button>
    <form id="import-form" class="row">
      <label for="import-key">Secret key (nsec or hex)</label>
      <input id="import-key" type="password" autocomplete="off" spellcheck="false">
      <button type="submit">Use this key</button>
    </form>
  </section>

  <section id="chat" aria-labelledby="chat-title" hidden>
    <h2 id="chat-title">Chat</h2>
    <div class="row">
      <label for="agent">Agent</label>
      <select id="agent"></select>
    </div>
    <form id="add-agent-form" class="row">
      <label for="add-agent">Other agent (npub or hex)</label>
      <input id="add-agent" autocomplete="off" spellcheck="false">
      <button type="submit">Add agent</button>
    </form>
    <div id="conversation" class="conversation" role="log" aria-label="Conversation" aria-live="polite"></div>
    <p id="status" class="status" role="status"></p>
    <form id="composer" class="composer">
      <label for="message">Message</label>
      <textarea id="message" rows="3"></textarea>
      <div class="actions">
        <button type="submit" id="send">Send</button>
        <button type="button" id="stop" hidden>Stop</button>
      </div>
    </form>
  </section>

  <section id="owner" aria-labelledby="owner-title" hidden>
    <h2 id="owner-title">Your agents</h2>
    <p id="owner-notice" class="status" role="status" hidden></p>
    <div id="owner-panel" hidden>
      <ul id="agents" class="agents" aria-label="Your agents"></ul>
      <form id="agent-form" class="agent-form" aria-labelledby="agent-form-title">
        <h3 id="agent-form-title">New agent</h3>
        <input type="hidden" id="edit-pubkey">
        <label for="agent-name">Name</label>
        <input id="agent-name">
        <label for="agent-provider">Provider</label>
        <select id="agent-provider">
          <option value="">deployment default</option>
          <option value="echo">echo</option>
          <option value="openai">openai</option>
          <option value="anthropic">anthropic</option>
          <option value="workers-ai">workers-ai</option>
        </select>
        <label for="agent-model">Model</label>
        <input id="agent-model" spellcheck="false">
        <label for="agent-system">System prompt</label>
        <textarea id="agent-system" rows="3"></textarea>
        <div class="actions">
          <button type="submit" id="agent-save">Create agent</button>
          <button type="button" id="agent-cancel-edit" hidden>Cancel edit</button>
        </div>
      </form>
      <h3 id="telemetry-title">Telemetry</h3>
      <p id="telemetry-stats" class="status"></p>
      <div id="telemetry" class="telemetry" role="log" aria-label="Telemetry"></div>
      <h3 id="usage-title">Usage</h3>
      <p id="usage-plan" class="status"></p>
      <p id="usage-summary" class="status"></p>
      <table id="usage" class="usage" aria-labelledby="usage-title">
        <thead><tr><th scope="col">Agent</th><th scope="col">Runs</th><th scope="col">Input tokens</th><th scope="col">Output tokens</th><th scope="col">Tool calls</th><th scope="col">Errors</th></tr></thead>
        <tbody id="usage-rows"></tbody>
      </table>
      <button type="button" id="usage-refresh" class="secondary">Refresh usage</button>
    </div>
  </section>

  <section id="tools" aria-labelledby="tools-title" hidden>
    <h2 id="tools-title">Tools</h2>
    <button type="button" id="tools-refresh">Find tools</button>
    <ul id="tool-list" class="tool-list" aria-label="Announced tools"></ul>
    <form id="tool-form" class="agent-form" aria-labelledby="tool-form-title" hidden>
      <h3 id="tool-form-title"></h3>
      <div id="tool-fields"></div>
      <button type="submit">Call tool</button>
    </form>
    <div id="tool-output" class="tool-output" role="log" aria-label="Tool output"></div>
  </section>
</main>
</body>
</html>
`;
