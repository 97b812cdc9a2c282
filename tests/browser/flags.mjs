// Flags that keep the browser off the network and quiet: no first-run, sync,
// component updates, safe-browsing or translate traffic, every host name but the
// loopback address resolving to nothing.
export const OFFLINE_FLAGS = [
  "--no-sandbox",
  "--no-first-run",
  "--no-default-browser-check",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
  "--disable-domain-reliability",
  "--disable-client-side-phishing-detection",
  "--disable-default-apps",
  "--disable-extensions",
  "--metrics-recording-only",
  "--safebrowsing-disable-auto-update",
  "--disable-features=Translate,OptimizationHints,MediaRouter,DialMediaRouteProvider,AutofillServerCommunication,CertificateTransparencyComponentUpdater",
  "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
  "--proxy-server=http://127.0.0.1:9",
  "--proxy-bypass-list=127.0.0.1",
  "--disable-dev-shm-usage",
];
