//! `cargo bench -p loops-core --bench cron_next`: nanoseconds per
//! [`CronSchedule::next_after`] call for common expressions in America/New_York.
//!
//! A plain `std::time::Instant` loop (no bench framework, so no extra dependency).
//! Each call starts from a different instant spread over 2026–2027, so the numbers
//! include DST days and are not a single cached path.

use loops_core::cron::CronSchedule;
use std::hint::black_box;
use std::time::Instant as Clock;

const EXPRESSIONS: &[&str] = &[
    "*/5 * * * *",
    "0 * * * *",
    "30 9 * * 1-5",
    "0 0 1 * *",
    "15 14 1 * MON",
    "0 0 29 2 *",
];
const ZONE: &str = "America/New_York";
const STARTS: usize = 4096;
const ITERATIONS: usize = 200_000;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let base: loops_core::Instant = "2026-01-01T00:00:00Z".parse()?;
    // A fixed linear congruential sequence: reproducible, spread over two years.
    let mut state: u64 = 0x2545_f491_4f6c_dd1d;
    let starts: Vec<loops_core::Instant> = (0..STARTS)
        .map(|_| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let seconds = (state >> 33) % (2 * 365 * 86_400);
            base + chrono::TimeDelta::seconds(seconds as i64)
        })
        .collect();

    println!("| expression ({ZONE}) | ns/call |");
    println!("|---|---:|");
    for expression in EXPRESSIONS {
        let schedule = CronSchedule::parse(expression, ZONE)?;
        // Warm up caches and branch predictors before timing.
        for start in &starts {
            black_box(schedule.next_after(black_box(*start)));
        }
        let clock = Clock::now();
        for i in 0..ITERATIONS {
            black_box(schedule.next_after(black_box(starts[i % STARTS])));
        }
        let ns = clock.elapsed().as_nanos() as f64 / ITERATIONS as f64;
        println!("| `{expression}` | {ns:.0} |");
    }
    Ok(())
}
