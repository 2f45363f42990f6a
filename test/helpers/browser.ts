/**
 * Debian's Chromium for the browser tests, driven by playwright-core: started as these machines
 * need it (their closed network refuses Chromium's background connections), and a page's requests
 * to any origin but the system's recorded and refused, so that none leaves the machine.
 */
import fs from 'node:fs';
import { chromium, type Browser, type Page } from 'playwright-core';

const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';

/** Why a browser test is skipped, or false when Chromium is there. */
export const noBrowser =
  !fs.existsSync(CHROMIUM) &&
  `no Chromium at ${CHROMIUM} (apt-get install chromium, as .ci/run does; or set CHROMIUM_PATH)`;

export function launchBrowser(): Promise<Browser> {
  return chromium.launch({
    executablePath: CHROMIUM,
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
}

/** The URLs the page asks of origins other than `origin`, each refused; the list fills as the page loads. */
export async function foreignRequests(page: Page, origin: string): Promise<string[]> {
  const foreign: string[] = [];
  await page.route(
    (url) => url.origin !== origin,
    (route) => {
      foreign.push(route.request().url());
      return route.abort();
    },
  );
  return foreign;
}
