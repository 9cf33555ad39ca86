//! Resource caps over the whole job — agent and critic sessions together:
//! turns, input+output tokens, USD. Enforced live (after every model call,
//! from the partial stream) and *before* spending: a session the remaining
//! budget cannot cover at its minimum is never started ("budget before cost").

use std::time::Duration;

use serde::Serialize;

use crate::agent::Price;
use crate::outcome::Reason;

/// Caps over the whole job (agent and critic sessions together): the
/// spend caps, which the gateway and the guards decide together
/// ([`Limits`]), and the clocks.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Caps {
    #[serde(flatten)]
    pub limits: Limits,
    #[serde(with = "crate::util::duration_text")]
    pub timeout: Duration,
    #[serde(with = "crate::util::duration_text")]
    pub attempt_timeout: Duration,
    #[serde(with = "crate::util::duration_text")]
    pub idle_timeout: Duration,
}

pub use crate::agent::gateway::spend::Limits;
pub use crate::agent::gateway::Spend;

/// The caps of a job, checked against spend. Every decision is the
/// gateway's own ([`Limits`]): what stops a session live, what the judge
/// checks between phases and what the gateway refuses cannot disagree.
#[derive(Debug, Clone)]
pub struct Budget {
    pub caps: Caps,
}

impl Budget {
    /// The one way a budget is made: from the job's caps (a job's
    /// `Job::budget`, a bench's own caps).
    pub fn new(caps: Caps) -> Budget {
        Budget { caps }
    }

    /// The cap that `spend` has reached, if any ([`Limits::reached`]).
    pub fn exceeded(&self, spend: &Spend) -> Option<Reason> {
        self.caps.limits.reached(spend)
    }

    /// Budget before cost ([`Limits::first_call`]).
    pub fn can_start(&self, spent: &Spend, price: Price, request_bytes: u64) -> Result<(), Reason> {
        self.caps.limits.first_call(spent, price, request_bytes)
    }

    pub fn remaining_usd(&self, spent: &Spend) -> f64 {
        self.caps.limits.remaining_usd(spent)
    }

    pub fn remaining_turns(&self, spent: &Spend) -> u64 {
        self.caps.limits.remaining_turns(spent)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::Agent;
    use std::time::Duration;

    fn price(model: &str) -> Price {
        crate::agent::ClaudeCode.prices()(model).expect("a Claude model")
    }

    fn budget(usd: f64, turns: u64, tokens: u64) -> Budget {
        Budget::new(Caps {
            limits: Limits {
                budget_usd: usd,
                max_turns: turns,
                max_tokens: tokens,
            },
            timeout: Duration::from_secs(60),
            attempt_timeout: Duration::from_secs(60),
            idle_timeout: Duration::from_secs(60),
        })
    }

    #[test]
    fn refuses_before_spending() {
        let b = budget(0.01, 100, 1_000_000);
        let spent = Spend {
            cost_usd: 0.0095,
            ..Spend::default()
        };
        // A first call of 1 KB on sonnet reserves 5120 * 2.5e-6 + 1024 * 1e-5
        // = 0.0231: it would cross the cap.
        assert_eq!(
            b.can_start(&Spend::default(), price("sonnet"), 1_024),
            Err(Reason::BudgetUsd)
        );
        // On haiku: 5120 * 1.25e-7 + 1024 * 5e-7 = 0.00115: it fits, at
        // first; not with 0.0095 spent.
        assert_eq!(
            b.can_start(&Spend::default(), price("haiku"), 1_024),
            Ok(())
        );
        assert_eq!(
            b.can_start(&spent, price("haiku"), 1_024),
            Err(Reason::BudgetUsd)
        );
        assert_eq!(b.exceeded(&spent), None);
        assert_eq!(
            b.exceeded(&Spend {
                cost_usd: 0.01,
                ..spent
            }),
            Some(Reason::BudgetUsd)
        );
    }

    #[test]
    fn turns_and_tokens() {
        let b = budget(10.0, 3, 5_000);
        // Three turns are allowed; the fourth trips, and may not start.
        let three = Spend {
            turns: 3,
            ..Spend::default()
        };
        assert_eq!(b.exceeded(&three), None);
        assert_eq!(
            b.exceeded(&Spend {
                turns: 4,
                ..Spend::default()
            }),
            Some(Reason::MaxTurns)
        );
        assert_eq!(
            b.can_start(&three, price("haiku"), 0),
            Err(Reason::MaxTurns)
        );
        assert_eq!(
            b.exceeded(&Spend {
                input_tokens: 4_000,
                output_tokens: 1_000,
                ..Spend::default()
            }),
            Some(Reason::MaxTokens)
        );
        assert_eq!(
            b.can_start(
                &Spend {
                    input_tokens: 4_000,
                    ..Spend::default()
                },
                price("haiku"),
                0
            ),
            Err(Reason::MaxTokens)
        );
        assert_eq!(
            b.remaining_turns(&Spend {
                turns: 2,
                ..Spend::default()
            }),
            1
        );
    }
}
