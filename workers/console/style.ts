// The web console's stylesheet: one column on phones (375 px and up), chat beside the owner panel
// on wide screens. System fonts only (no external requests).

export const CONSOLE_CSS = `
:root { color-scheme: light dark; --fg: #1d1d1f; --bg: #fafafa; --muted: #666; --line: #d0d0d5; --accent: #5b3cc4; --card: #fff; --err: #b00020; }
@media (prefers-color-scheme: dark) { :root { --fg: #eee; --bg: #141417; --muted: #aaa; --line: #3a3a42; --accent: #a08cff; --card: #1e1e24; --err: #ff7a85; } }
* { box-sizing: border-box; }
[hidden] { display: none !important; }
body { margin: 0; font: 15px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: var(--fg); background: var(--bg); }
code, pre, textarea, input { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; }
.top { display: flex; flex-wrap: wrap; gap: .5rem 1rem; align-items: center; justify-content: space-between; padding: .6rem 1rem; border-bottom: 1px solid var(--line); }
.top h1 { font-size: 1.1rem; margin: 0; }
.account { display: flex; gap: .5rem; align-items: center; flex-wrap: wrap; min-width: 0; }
.account code { overflow-wrap: anywhere; font-size: .8rem; }
main { display: grid; gap: 1rem; padding: 1rem; grid-template-columns: minmax(0, 1fr); }
@media (min-width: 900px) { main { grid-template-columns: minmax(0, 3fr) minmax(0, 2fr); } #signin { grid-column: 1 / -1; } }
section { background: var(--card); border: 1px solid var(--line); border-radius: 8px; padding: .75rem 1rem; min-width: 0; }
h2 { font-size: 1rem; margin: 0 0 .5rem; } h3 { font-size: .95rem; margin: 1rem 0 .4rem; }
.row { display: flex; flex-wrap: wrap; gap: .4rem; align-items: center; margin: .3rem 0; }
.row input, .row select { flex: 1 1 12rem; min-width: 0; }
input, select, textarea, button { font-size: 1rem; padding: .4rem .5rem; border: 1px solid var(--line); border-radius: 6px; background: var(--bg); color: var(--fg); max-width: 100%; }
button { cursor: pointer; background: var(--accent); color: #fff; border-color: var(--accent); min-height: 2.5rem; }
button.secondary { background: transparent; color: var(--accent); }
.notice { margin: .5rem 1rem; padding: .5rem .75rem; border: 1px solid var(--err); color: var(--err); border-radius: 6px; }
.conversation { height: 50vh; min-height: 14rem; overflow-y: auto; border: 1px solid var(--line); border-radius: 6px; padding: .5rem; background: var(--bg); }
.msg { margin: .4rem 0; padding: .4rem .6rem; border-radius: 8px; overflow-wrap: anywhere; }
.msg.user { background: color-mix(in srgb, var(--accent) 15%, transparent); margin-left: 15%; }
.msg.agent { background: var(--card); border: 1px solid var(--line); margin-right: 5%; }
.msg.error { border-color: var(--err); color: var(--err); }
.msg p { margin: .2rem 0; } .msg ul { margin: .2rem 0; padding-left: 1.2rem; }
pre { overflow-x: auto; padding: .5rem; background: color-mix(in srgb, var(--fg) 8%, transparent); border-radius: 6px; margin: .3rem 0; }
.tool-card { border: 1px dashed var(--line); border-radius: 6px; padding: .3rem .5rem; margin: .3rem 0; font-size: .85rem; }
.tool-card pre { font-size: .8rem; }
.status { color: var(--muted); min-height: 1.2em; margin: .3rem 0; font-size: .9rem; }
.composer { display: grid; gap: .4rem; }
.composer textarea { width: 100%; resize: vertical; }
.actions { display: flex; gap: .5rem; flex-wrap: wrap; }
.agents { list-style: none; padding: 0; margin: 0; }
.agents li { display: flex; flex-wrap: wrap; gap: .4rem; align-items: center; padding: .3rem 0; border-bottom: 1px solid var(--line); }
.agents li .name { font-weight: 600; } .agents li code { font-size: .75rem; overflow-wrap: anywhere; flex: 1 1 100%; }
.agent-form { display: grid; gap: .3rem; }
.telemetry, .tool-output { max-height: 40vh; min-height: 6rem; overflow-y: auto; font: .78rem/1.35 ui-monospace, monospace; border: 1px solid var(--line); border-radius: 6px; padding: .4rem; background: var(--bg); }
.telemetry .line { overflow-wrap: anywhere; } .telemetry .gap { color: var(--err); }
.usage { border-collapse: collapse; width: 100%; font-size: .85rem; margin: .3rem 0; } .usage th, .usage td { text-align: right; padding: .15rem .4rem; border-bottom: 1px solid var(--line); } .usage th:first-child { text-align: left; overflow-wrap: anywhere; }
.tool-list { list-style: none; padding: 0; } .tool-list li { padding: .3rem 0; border-bottom: 1px solid var(--line); }
`;
