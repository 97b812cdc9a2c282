// First contentful paint of the dashboard's overview in headless Chromium, for
// `loops-bench dashboard`. Env: LOOPS_URL, LOOPS_TOKEN, LOOPS_LOADS, CHROMIUM.
// Prints {"fcpMs": [...]} (one figure per load, each in a fresh tab after login).
import { chromium } from "playwright-core";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { OFFLINE_FLAGS } from "./flags.mjs";

const URL = process.env.LOOPS_URL, TOKEN = process.env.LOOPS_TOKEN;
const loads = Number(process.env.LOOPS_LOADS || 10);
const profile = mkdtempSync(join(tmpdir(), "loops-fcp-"));
const context = await chromium.launchPersistentContext(profile, {
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  headless: true, args: OFFLINE_FLAGS, viewport: { width: 1280, height: 800 },
});
try {
  const login = context.pages()[0] || (await context.newPage());
  await login.goto(URL + "/login");
  await login.fill("#token", TOKEN);
  await Promise.all([login.waitForURL(URL + "/"), login.click("button[type=submit]")]);
  const fcpMs = [];
  for (let i = 0; i < loads; i++) {
    const page = await context.newPage();
    await page.goto(URL + "/", { waitUntil: "load" });
    const fcp = await page.evaluate(() => new Promise((resolve) => {
      const got = performance.getEntriesByName("first-contentful-paint")[0];
      if (got) return resolve(got.startTime);
      new PerformanceObserver((l) => resolve(l.getEntries()[0].startTime)).observe({ type: "paint", buffered: true });
    }));
    fcpMs.push(Math.round(fcp * 10) / 10);
    await page.close();
  }
  console.log(JSON.stringify({ fcpMs }));
} finally {
  await context.close();
  rmSync(profile, { recursive: true, force: true });
}
