//! Resource caps over the whole job — agent and critic sessions together:
//! turns, input+output tokens, USD. Enforced live (after every model call,
//! from the partial stream) and *before* spending: a session the remaining
//! budget cannot cover at its minimum is never started ("budget before cost").

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::agent::events::Usage;
use crate::agent::gateway::{Metered, MeteredCall};
use crate::agent::Price;
use crate::outcome::Reason;

/// Caps over the whole job (agent and critic sessions together).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Caps {
    pub budget_usd: f64,
    pub max_turns: u64,
    pub max_tokens: u64,
    #[serde(with = "crate::util::duration_text")]
    pub timeout: Duration,
    #[serde(with = "crate::util::duration_text")]
    pub attempt_timeout: Duration,
    #[serde(with = "crate::util::duration_text")]
    pub idle_timeout: Duration,
}

/// What has been spent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Spend {
    pub cost_usd: f64,
    pub turns: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
}

impl Spend {
    pub fn tokens(&self) -> u64 {
        self.input_tokens + self.output_tokens
    }

    pub fn add(&mut self, other: &Spend) {
        self.cost_usd += other.cost_usd;
        self.turns += other.turns;
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
    }

    pub fn plus(&self, other: &Spend) -> Spend {
        let mut s = *self;
        s.add(other);
        s
    }

    /// The larger of two readings of the same spend, field by field (the
    /// stream's estimate and the gateway's meter of one session).
    pub fn max(&self, other: &Spend) -> Spend {
        Spend {
            cost_usd: self.cost_usd.max(other.cost_usd),
            turns: self.turns.max(other.turns),
            input_tokens: self.input_tokens.max(other.input_tokens),
            output_tokens: self.output_tokens.max(other.output_tokens),
        }
    }

    /// One metered call: a turn, its tokens (cache reads and writes count as
    /// input) and its price.
    pub fn of_call(call: &MeteredCall) -> Spend {
        let usage = call.usage();
        Spend {
            cost_usd: call.cost_usd,
            turns: 1,
            input_tokens: usage.all_input(),
            output_tokens: usage.output_tokens,
        }
    }

    /// What a gateway metered since it started.
    pub fn of_metered(m: &Metered) -> Spend {
        Spend {
            cost_usd: m.cost_usd,
            turns: m.calls,
            input_tokens: m.input_tokens,
            output_tokens: m.output_tokens,
        }
    }
}

/// The smallest model call a session can make: its first request carries at
/// least the system prompt. Used to refuse a session the budget cannot cover.
pub const MIN_CALL: Usage = Usage {
    input_tokens: 1_000,
    output_tokens: 100,
    cache_creation_input_tokens: 0,
    cache_read_input_tokens: 0,
};

/// The caps of a job, checked against spend, with the agent's price table
/// for estimates.
#[derive(Debug, Clone)]
pub struct Budget {
    pub caps: Caps,
    pub price: fn(&str) -> Price,
}

impl Budget {
    /// The cap that `spend` has reached, if any. Money and tokens are used
    /// up when the cap is reached; `max_turns` allows that many turns and
    /// trips when one more starts.
    pub fn exceeded(&self, spend: &Spend) -> Option<Reason> {
        if spend.cost_usd >= self.caps.budget_usd {
            Some(Reason::BudgetUsd)
        } else if spend.turns > self.caps.max_turns {
            Some(Reason::MaxTurns)
        } else if spend.tokens() >= self.caps.max_tokens {
            Some(Reason::MaxTokens)
        } else {
            None
        }
    }

    /// Budget before cost: may a session on `model` start, given `spent`?
    pub fn can_start(&self, spent: &Spend, model: &str) -> Result<(), Reason> {
        let min = Spend {
            cost_usd: (self.price)(model).cost(&MIN_CALL),
            turns: 1,
            input_tokens: MIN_CALL.input_tokens,
            output_tokens: MIN_CALL.output_tokens,
        };
        let after = spent.plus(&min);
        if after.cost_usd > self.caps.budget_usd {
            return Err(Reason::BudgetUsd);
        }
        if after.turns > self.caps.max_turns {
            return Err(Reason::MaxTurns);
        }
        if after.tokens() > self.caps.max_tokens {
            return Err(Reason::MaxTokens);
        }
        Ok(())
    }

    pub fn remaining_usd(&self, spent: &Spend) -> f64 {
        (self.caps.budget_usd - spent.cost_usd).max(0.0)
    }

    pub fn remaining_turns(&self, spent: &Spend) -> u64 {
        self.caps.max_turns.saturating_sub(spent.turns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn budget(usd: f64, turns: u64, tokens: u64) -> Budget {
        Budget {
            price: Price::for_model,
            caps: Caps {
                budget_usd: usd,
                max_turns: turns,
                max_tokens: tokens,
                timeout: Duration::from_secs(60),
                attempt_timeout: Duration::from_secs(60),
                idle_timeout: Duration::from_secs(60),
            },
        }
    }

    #[test]
    fn refuses_before_spending() {
        let b = budget(0.01, 100, 1_000_000);
        let spent = Spend {
            cost_usd: 0.0095,
            ..Spend::default()
        };
        // One minimal sonnet call costs 0.003: it would cross the cap.
        assert_eq!(b.can_start(&spent, "sonnet"), Err(Reason::BudgetUsd));
        // One minimal haiku call costs 0.00015: it fits.
        assert_eq!(b.can_start(&spent, "haiku"), Ok(()));
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
        assert_eq!(b.can_start(&three, "haiku"), Err(Reason::MaxTurns));
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
                "haiku"
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
