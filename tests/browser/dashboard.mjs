// The dashboard in a real browser: Debian's chromium driven by playwright-core
// against a real `loops serve` with a real daemon (both started by
// crates/loops/tests/e2e/dashboard.rs, which runs this script).
//
// Env: LOOPS_URL (http://127.0.0.1:PORT), LOOPS_TOKEN, LOOPS_OUT (screenshots go
// there), CHROMIUM (the executable). Prints `screenshot: PATH` per page and `ok: CASE`
// per case; exits non-zero on the first failure, naming it.
import { chromium } from "playwright-core";
import { mkdtempSync, mkdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { OFFLINE_FLAGS } from "./flags.mjs";

const URL = process.env.LOOPS_URL;
const TOKEN = process.env.LOOPS_TOKEN;
const OUT = process.env.LOOPS_OUT;
const CHROMIUM = process.env.CHROMIUM || "/usr/bin/chromium";
if (!URL || !TOKEN || !OUT) {
  console.error("LOOPS_URL, LOOPS_TOKEN and LOOPS_OUT are required");
  process.exit(2);
}
mkdirSync(OUT, { recursive: true });


const api = async (method, path, body) => {
  const r = await fetch(URL + path, {
    method,
    headers: { authorization: "Bearer " + TOKEN, "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await r.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  if (r.status >= 400 && !path.includes("expect-error")) {
    throw new Error(`${method} ${path}: ${r.status} ${text}`);
  }
  return { status: r.status, json, text };
};

const every = (ms) => ({ type: "interval", everyMs: ms, anchor: "fixed_rate" });
const cmd = (command) => ({ type: "command", command, shell: true });

let current = "setup";
const step = (name) => { current = name; };
const ok = (name) => console.log("ok: " + name);
const check = (cond, what) => { if (!cond) throw new Error(what); };
const shots = [];
async function shot(page, name) {
  const path = join(OUT, name + ".png");
  await page.screenshot({ path, fullPage: false });
  shots.push(path);
  console.log("screenshot: " + path);
}

const profile = mkdtempSync(join(tmpdir(), "loops-chromium-"));
let context;
try {
  // ---- the store's loops and a workflow, through the API ----
  const steady = (await api("POST", "/v1/loops", {
    name: "nightly-report", schedule: { type: "cron", expression: "0 2 * * *", timezone: "Europe/Berlin" },
    target: cmd("echo report"), labels: ["reports"],
  })).json;
  const ticker = (await api("POST", "/v1/loops", {
    name: "ticker", schedule: every(3000), target: cmd("echo tick"), labels: ["demo"],
  })).json;
  const streamer = (await api("POST", "/v1/loops", {
    name: "streamer", schedule: every(3600000), labels: ["demo"],
    target: cmd("for i in 1 2 3 4 5 6; do echo \"line $i\"; printf '\\033[31mred %s\\033[0m\\n' $i; sleep 0.6; done"),
  })).json;
  await api("POST", "/v1/loops", {
    name: "<script>alert(1)</script>", schedule: every(600000), target: cmd("true"),
  });
  const diamond = {
    name: "diamond",
    description: "a, then b and c side by side, then d",
    steps: [
      { id: "fetch", target: { type: "command", command: "sleep 1.5; echo fetched", shell: true } },
      { id: "left", dependsOn: ["fetch"], target: { type: "command", command: "sleep 2; echo left", shell: true } },
      { id: "right", dependsOn: ["fetch"], target: { type: "command", command: "sleep 2.5; echo right", shell: true } },
      { id: "merge", dependsOn: ["left", "right"], target: { type: "command", command: "sleep 1.5; echo merged", shell: true } },
    ],
  };
  await api("POST", "/v1/workflows", diamond);

  context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    args: OFFLINE_FLAGS,
    viewport: { width: 1280, height: 800 },
    colorScheme: "light",
  });
  const page = context.pages()[0] || (await context.newPage());
  page.setDefaultTimeout(30000);
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));

  // ---- refused without the token ----
  step("a request without the token is refused");
  const bare = await fetch(URL + "/v1/loops");
  check(bare.status === 401, "GET /v1/loops without a token: " + bare.status);
  await page.goto(URL + "/");
  check(new globalThis.URL(page.url()).pathname === "/login", "a page without a session went to " + page.url());
  check(!(await page.content()).includes("nightly-report"), "the login page shows a loop");
  await page.fill("#token", "0".repeat(64));
  await page.click("button[type=submit]");
  await page.waitForSelector(".error");
  check(new globalThis.URL(page.url()).pathname === "/login", "a wrong token was let in");
  await shot(page, "login");
  ok(current);

  // ---- log in ----
  step("login");
  await page.fill("#token", TOKEN);
  await Promise.all([page.waitForURL(URL + "/"), page.click("button[type=submit]")]);
  const cookies = await context.cookies();
  const session = cookies.find((c) => c.name === "loops_session");
  check(session && session.httpOnly && session.sameSite === "Strict", "the session cookie: " + JSON.stringify(cookies));
  ok(current);

  // ---- the overview lists the loops ----
  step("the overview lists the loops");
  for (const name of ["nightly-report", "ticker", "streamer", "<script>alert(1)</script>"]) {
    const found = await page.locator("table.loops tbody th a", { hasText: name }).count();
    check(found === 1, "overview row for " + name + ": " + found);
  }
  check(await page.locator("text=at 02:00 Europe/Berlin").count() >= 1, "the cron schedule in words");
  check(await page.locator("text=every 3s").count() >= 1, "the interval in words");
  ok(current);

  // ---- a run started by the schedule appears live, without reload ----
  step("a run started by the schedule appears live without reload");
  await page.evaluate(() => { window.__noReload = true; });
  const tickerCells = `tr[data-loop="${ticker.id}"] .strip i`;
  await page.waitForFunction((sel) => document.querySelectorAll(sel).length >= 1, tickerCells, { timeout: 30000 });
  check(await page.evaluate(() => window.__noReload === true), "the page was reloaded");
  const title = await page.locator(tickerCells).first().getAttribute("title");
  check(/\d\d:\d\d:\d\d .* (succeeded|running)/.test(title || ""), "the cell's tooltip: " + title);
  await page.waitForSelector("#live.on");
  ok(current);

  // ---- a failing loop: red in its strip and in the counters ----
  step("a failing loop shows red in its strip and the counters");
  const failedBefore = Number(await page.locator('[data-count="failed"]').textContent());
  const broken = (await api("POST", "/v1/loops", {
    name: "broken", schedule: every(2000), target: cmd("echo doomed >&2; exit 3"), labels: ["demo"],
  })).json;
  const brokenCell = `tr[data-loop="${broken.id}"] .strip i.f`;
  await page.waitForFunction((sel) => document.querySelectorAll(sel).length >= 1, brokenCell, { timeout: 30000 });
  const colour = await page.locator(brokenCell).first().evaluate((el) => getComputedStyle(el).backgroundColor);
  const [r, g, b] = (colour.match(/\d+/g) || []).map(Number);
  check(r > 150 && g < 90 && b < 90, "the failed cell is not red: " + colour);
  const marker = await page.locator(brokenCell).first().evaluate((el) => getComputedStyle(el, "::before").content);
  check(marker.includes("✕"), "the failed cell has no marker: " + marker);
  await page.waitForFunction((n) => Number(document.querySelector('[data-count="failed"]').textContent) > n, failedBefore);
  const failedBox = await page.locator(".count.fail").evaluate((el) => getComputedStyle(el).borderLeftColor);
  check(/rgb\((2\d\d|1[5-9]\d), \d{1,2}, \d{1,2}\)/.test(failedBox), "the failed counter is not red: " + failedBox);
  check(await page.evaluate(() => window.__noReload === true), "the page was reloaded");
  await api("POST", `/v1/loops/${broken.id}/pause`);
  await shot(page, "overview");
  ok(current);

  // ---- run-now from the loop page; its output streams on the run page ----
  step("run-now from the page streams its output on the run page");
  await page.goto(URL + "/loops/" + streamer.id);
  await shot(page, "loop");
  await Promise.all([
    page.waitForURL(/\/runs\/[0-9a-f]+$/),
    page.click('button[data-action="run-now"]'),
  ]);
  await page.waitForFunction(() => document.getElementById("stdout").textContent.includes("line 1"));
  const midway = await page.evaluate(() => ({
    text: document.getElementById("stdout").textContent,
    status: document.getElementById("run-status").textContent,
    red: document.querySelectorAll("#stdout span.f1").length,
  }));
  check(midway.status.includes("running"), "the run was not running while its output streamed: " + midway.status);
  check(!midway.text.includes("line 6"), "the output came all at once, not streamed");
  check(midway.red >= 1, "the live tail's ANSI colours were not rendered");
  await shot(page, "run-live");
  await page.waitForFunction(() => document.getElementById("run-status").textContent.includes("succeeded"), null, { timeout: 30000 });
  const done = await page.evaluate(() => document.getElementById("stdout").textContent);
  check(done.includes("line 6") && done.includes("red 6"), "the stored output: " + done);
  check(!done.includes("\u001b"), "raw escapes in the output");
  await shot(page, "run");
  ok(current);

  // ---- a diamond DAG whose steps change colour live ----
  step("the workflow page shows a diamond DAG whose steps change colour live");
  await page.goto(URL + "/workflows");
  await shot(page, "workflows");
  const started = (await api("POST", "/v1/workflows/diamond/run")).json;
  const runId = (started.workflowRun || started).id;
  await page.goto(URL + "/workflow-runs/" + runId);
  await page.evaluate(() => { window.__noReload = true; });
  check(await page.locator("svg.dag a.node").count() === 4, "four steps");
  check(await page.locator("svg.dag path.edge").count() === 4, "four edges");
  const box = async (id) => page.locator(`svg.dag a.node[data-step="${id}"] rect`).boundingBox();
  const [f, l, rr, m] = [await box("fetch"), await box("left"), await box("right"), await box("merge")];
  check(f.x < l.x && l.x === rr.x && rr.x < m.x, "levels left to right");
  check(l.y !== rr.y && Math.abs(f.y - m.y) < 1, "a diamond: the middle level side by side");
  const seen = { fetch: new Set(), left: new Set(), right: new Set(), merge: new Set() };
  const deadline = Date.now() + 40000;
  for (;;) {
    for (const id of Object.keys(seen)) {
      const cls = await page.locator(`svg.dag a.node[data-step="${id}"]`).getAttribute("class");
      seen[id].add((cls.match(/st-(\w+)/) || [])[1]);
    }
    if (seen.left.has("running") && !seen.merge.has("ok") && !shots.some((p) => p.endsWith("workflow-run-live.png"))) {
      await shot(page, "workflow-run-live");
    }
    if (seen.merge.has("ok")) break;
    if (Date.now() > deadline) throw new Error("the workflow run did not finish live: " + JSON.stringify(Object.fromEntries(Object.entries(seen).map(([k, v]) => [k, [...v]]))));
    await page.waitForTimeout(150);
  }
  const changed = Object.values(seen).filter((s) => s.size >= 2).length;
  check(changed >= 3, "steps that changed colour live: " + JSON.stringify(Object.fromEntries(Object.entries(seen).map(([k, v]) => [k, [...v]]))));
  check(await page.evaluate(() => window.__noReload === true), "the page was reloaded");
  const fill = await page.locator('svg.dag a.node[data-step="merge"] rect').evaluate((el) => getComputedStyle(el).stroke);
  check(/rgb\(\d{1,2}, 1[0-9]\d, \d{1,2}\)/.test(fill), "a succeeded step is not green: " + fill);
  check((await page.locator('svg.dag a.node[data-step="merge"] text.state').textContent()).includes("succeeded"), "the step's status in words");
  await page.click('svg.dag a.node[data-step="left"]');
  await page.waitForSelector("#chosen");
  check((await page.locator("#chosen pre.out").first().textContent()).includes("left"), "the step's output");
  await shot(page, "workflow-run");
  ok(current);

  // ---- the rest, for the record ----
  step("runners and the phone width");
  await page.goto(URL + "/runners");
  check(await page.locator("text=PostgreSQL").count() >= 1, "the runners page names PostgreSQL");
  await shot(page, "runners");
  await page.setViewportSize({ width: 390, height: 844 });
  await page.goto(URL + "/");
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  check(overflow <= 1, "the overview is wider than a phone: " + overflow + "px");
  await shot(page, "overview-phone");
  // Keyboard: the first Tab reaches the skip link, then the navigation.
  await page.keyboard.press("Tab");
  check(await page.evaluate(() => document.activeElement.className) === "skiplink", "the skip link is not first");
  await page.setViewportSize({ width: 1280, height: 800 });
  await page.emulateMedia({ colorScheme: "dark" });
  await page.goto(URL + "/");
  const bg = await page.evaluate(() => getComputedStyle(document.body).backgroundColor);
  check(bg === "rgb(13, 17, 23)", "dark scheme background: " + bg);
  await shot(page, "overview-dark");
  // The README's picture: the overview after all of the above.
  await page.emulateMedia({ colorScheme: "light" });
  await page.goto(URL + "/");
  await page.waitForSelector("#live.on");
  await shot(page, "dashboard");
  check(errors.length === 0, "script errors: " + errors.join("; "));
  ok(current);
  console.log("all cases passed; screenshots: " + shots.length);
} catch (e) {
  console.error(`FAILED: ${current}: ${e && e.stack ? e.stack : e}`);
  process.exitCode = 1;
} finally {
  if (context) await context.close().catch(() => {});
  rmSync(profile, { recursive: true, force: true });
}
