//! Status tools: the daemon's status, `doctor`, `health` and `usage`, as the CLI
//! reports them. (The tools are declared in [`crate::tools`]; here is what answers
//! them.)

use crate::params::{HealthParams, HoldsClearParams, UsageParams};
use crate::server::{blocking, json, LoopsMcp, Outcome};
use loops_core::usage::GroupBy;

/// `usage`'s window when `since` is not given (as `loops usage`).
const DEFAULT_USAGE_SINCE: &str = "7d";

impl LoopsMcp {
    pub(crate) async fn doctor(&self) -> Outcome {
        let dir = self.options().data_dir.clone();
        let store = self.options().store.clone();
        blocking(move || json(&loops_runtime::doctor::doctor(&dir, store.as_deref()))).await
    }

    pub(crate) async fn health(&self, p: HealthParams) -> Outcome {
        let client = self.reader()?;
        blocking(move || {
            let report = client
                .health(chrono::Utc::now(), &p.labels)
                .map_err(|e| e.to_string())?;
            let text = json(&report.json())?;
            drop(report);
            loops_runtime::memory::after_document(text.len());
            Ok(text)
        })
        .await
    }

    pub(crate) async fn holds_clear(&self, p: HoldsClearParams) -> Outcome {
        self.mutation("loops_holds_clear")?;
        let provider: loops_core::Provider = p.provider.parse()?;
        self.write(move |c| c.clear_holds(provider, p.account.as_deref()))
            .await
    }

    pub(crate) async fn usage(&self, p: UsageParams) -> Outcome {
        let window =
            crate::flags::duration("--since", p.since.as_deref().unwrap_or(DEFAULT_USAGE_SINCE))?;
        let by: GroupBy = p.by.as_deref().unwrap_or("loop").parse()?;
        let since = chrono::Utc::now() - window.to_chrono();
        self.read(move |c| c.usage(since, by)).await
    }
}
