//! Two-phase spend: every model call reserves its worst case before it is
//! forwarded and settles to what it cost when it ends.
//!
//! Admission that counts finished calls only lets parallel calls race the
//! cap (eight calls admitted at once, each seeing the same spend), and a
//! stream cut before its final usage looks nearly free. So the gateway keeps
//! one [`Ledger`]: what was spent before it started, what its finished calls
//! settled to, and what the calls in flight have reserved. A call is let
//! through only when its reservation fits beside everyone else's; a call
//! whose output bound does not fit gets a smaller `max_tokens` (never below
//! [`MIN_GRANT`]) or is refused. At the end the reservation is replaced by
//! the metered usage — or, when the response never said what it cost (a
//! client gone before `message_delta`, an upstream cut), by the reservation
//! itself: the most that call can have been billed.
//!
//! The ledger is behind one mutex held for arithmetic only, never across an
//! upstream call.

use serde::{Deserialize, Serialize};

use super::MeteredCall;
use crate::agent::events::Usage;
use crate::agent::Price;
use crate::outcome::Reason;

/// What has been spent (or is reserved): money, turns, tokens.
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

    /// `self - other`, never below zero (a reservation taken back).
    pub fn minus(&self, other: &Spend) -> Spend {
        Spend {
            cost_usd: (self.cost_usd - other.cost_usd).max(0.0),
            turns: self.turns.saturating_sub(other.turns),
            input_tokens: self.input_tokens.saturating_sub(other.input_tokens),
            output_tokens: self.output_tokens.saturating_sub(other.output_tokens),
        }
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

    /// One model call's usage at `price`: a turn, its tokens (cache reads
    /// and writes count as input).
    pub fn of_usage(usage: &Usage, price: Price) -> Spend {
        Spend {
            cost_usd: price.cost(usage),
            turns: 1,
            input_tokens: usage.all_input(),
            output_tokens: usage.output_tokens,
        }
    }

    /// One metered call.
    pub fn of_call(call: &MeteredCall) -> Spend {
        let usage = call.usage();
        Spend {
            cost_usd: call.cost_usd,
            turns: 1,
            input_tokens: usage.all_input(),
            output_tokens: usage.output_tokens,
        }
    }
}

/// The caps on spend over the whole job — agent, critic and examiner
/// sessions together. The one type the gateway reserves against and the
/// live guards, the judge and `resume` check, and the one place each cap is
/// decided: [`Limits::reached`] after spending, [`Ledger::reserve`] before
/// (a call, and through [`Limits::first_call`] a session).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Limits {
    pub budget_usd: f64,
    pub max_turns: u64,
    pub max_tokens: u64,
}

impl Limits {
    /// No cap at all (benchmarks, tests of other things).
    pub const NONE: Limits = Limits {
        budget_usd: f64::INFINITY,
        max_turns: u64::MAX,
        max_tokens: u64::MAX,
    };

    /// The cap that `spend` has reached, if any. Money and tokens are used
    /// up when the cap is reached; `max_turns` allows that many turns and
    /// trips when one more starts.
    pub fn reached(&self, spend: &Spend) -> Option<Reason> {
        if spend.cost_usd >= self.budget_usd {
            Some(Reason::BudgetUsd)
        } else if spend.turns > self.max_turns {
            Some(Reason::MaxTurns)
        } else if spend.tokens() >= self.max_tokens {
            Some(Reason::MaxTokens)
        } else {
            None
        }
    }

    /// Budget before cost: may a session on a model of `price` start,
    /// given `spent`? Only when the gateway would let its first call
    /// through — the same reservation [`Ledger::reserve`] makes: a request
    /// of `request_bytes` at its dearest, with the smallest output bound
    /// the gateway grants.
    pub fn first_call(
        &self,
        spent: &Spend,
        price: Price,
        request_bytes: u64,
    ) -> Result<(), Reason> {
        let first = Ask {
            model: String::new(),
            max_tokens: MIN_GRANT,
            input_bound: request_bytes.saturating_add(INPUT_MARGIN),
        };
        Ledger::new(*self, *spent)
            .reserve(&first, price)
            .map(|_| ())
            .map_err(|r| r.reason)
    }

    pub fn remaining_usd(&self, spent: &Spend) -> f64 {
        (self.budget_usd - spent.cost_usd).max(0.0)
    }

    pub fn remaining_turns(&self, spent: &Spend) -> u64 {
        self.max_turns.saturating_sub(spent.turns)
    }
}

/// What a model call asks for, read from its request before it is
/// forwarded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ask {
    pub model: String,
    /// The request's own output bound (`max_tokens`).
    pub max_tokens: u64,
    /// An upper bound on the call's input tokens (of every kind).
    pub input_bound: u64,
}

/// The smallest output bound a call is clamped to; a call the budget
/// cannot give that many output tokens (or its own smaller `max_tokens`)
/// is refused instead.
pub const MIN_GRANT: u64 = 1024;

/// Input tokens reserved beyond the request's byte count: a token of text
/// is at least a byte on every tokenizer loopd prices, and the margin
/// covers what the upstream adds (system prompts of server-side features,
/// the message framing). Images and documents are not text: the wires add
/// their pixels' and pages' worth on top ([`super::media`]).
pub const INPUT_MARGIN: u64 = 4096;

/// A call let through: its reservation, and the output bound it may use.
#[derive(Debug, Clone, PartialEq)]
pub struct Grant {
    /// The `max_tokens` the call is forwarded with (`<=` what it asked).
    pub max_tokens: u64,
    /// What it asked for.
    pub asked: u64,
    /// The worst case reserved for it.
    pub reserved: Spend,
    /// Its input bound and price, to settle a call that never said what it
    /// cost.
    pub input_bound: u64,
    pub price: Price,
}

impl Grant {
    /// The call's cost when it ended without its final usage: whatever it
    /// read of the input (`seen`, from `message_start`; else the input
    /// bound, all of it as cache writes, the dearest kind) and the whole
    /// output bound.
    pub fn worst_case(&self, seen: Option<&Usage>) -> Usage {
        let input = match seen {
            Some(u) if u.all_input() > 0 => Usage {
                output_tokens: 0,
                ..*u
            },
            _ => dearest_input(self.input_bound, self.price),
        };
        Usage {
            output_tokens: self.max_tokens.max(seen.map_or(0, |u| u.output_tokens)),
            ..input
        }
    }
}

/// `tokens` of input, all of the kind `price` charges most for (a cache
/// write, or plain input where writes cost no more).
fn dearest_input(tokens: u64, price: Price) -> Usage {
    if price.cache_write > price.input {
        Usage {
            cache_creation_input_tokens: tokens,
            ..Usage::default()
        }
    } else {
        Usage {
            input_tokens: tokens,
            ..Usage::default()
        }
    }
}

/// A refused call and the cap that refused it.
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    pub reason: Reason,
    pub message: String,
}

/// What the job spent before the gateway started, what its calls settled
/// to, and what the calls in flight reserved.
#[derive(Debug, Clone)]
pub struct Ledger {
    limits: Limits,
    before: Spend,
    settled: Spend,
    reserved: Spend,
    /// Every call settled so far (for [`super::Gateway::metered`]).
    calls: u64,
}

impl Ledger {
    pub fn new(limits: Limits, before: Spend) -> Ledger {
        Ledger {
            limits,
            before,
            settled: Spend::default(),
            reserved: Spend::default(),
            calls: 0,
        }
    }

    /// Spent before plus settled: what the job has spent for sure.
    pub fn spent(&self) -> Spend {
        self.before.plus(&self.settled)
    }

    /// What this gateway's calls settled to (not what came before).
    pub fn settled(&self) -> Spend {
        self.settled
    }

    /// What the calls in flight hold.
    pub fn reserved(&self) -> Spend {
        self.reserved
    }

    pub fn calls(&self) -> u64 {
        self.calls
    }

    /// Reserve the worst case of `ask` at `price` beside everything spent
    /// and reserved, clamping its output bound to what fits.
    pub fn reserve(&mut self, ask: &Ask, price: Price) -> Result<Grant, Refusal> {
        let committed = self.spent().plus(&self.reserved);
        let l = self.limits;
        // Input at its dearest: every token of the dearest kind.
        let input = dearest_input(ask.input_bound, price);
        let input_cost = price.cost(&input);
        let refuse = |reason: Reason, what: String| {
            Err(Refusal {
                reason,
                message: format!(
                    "the job's remaining {what} cannot cover this call on `{}` (spent and reserved: ${:.4} of ${}, {} of {} turns, {} of {} tokens)",
                    if ask.model.is_empty() { "?" } else { &ask.model },
                    committed.cost_usd,
                    l.budget_usd,
                    committed.turns,
                    l.max_turns,
                    committed.tokens(),
                    l.max_tokens
                ),
            })
        };
        if committed.turns.saturating_add(1) > l.max_turns {
            return refuse(Reason::MaxTurns, "turns".into());
        }
        // Output tokens each cap leaves after the input's worst case.
        let by_tokens = l
            .max_tokens
            .saturating_sub(committed.tokens())
            .saturating_sub(ask.input_bound);
        let usd_left = l.budget_usd - committed.cost_usd - input_cost;
        let per_output = price.output / 1_000_000.0;
        let by_usd = if usd_left <= 0.0 {
            0
        } else if per_output <= 0.0 || !per_output.is_finite() {
            u64::MAX
        } else {
            let n = (usd_left / per_output).floor();
            if n >= u64::MAX as f64 {
                u64::MAX
            } else {
                n as u64
            }
        };
        let affordable = by_tokens.min(by_usd);
        let needed = ask.max_tokens.clamp(1, MIN_GRANT);
        if affordable < needed {
            return if by_usd < needed {
                refuse(Reason::BudgetUsd, "budget".into())
            } else {
                refuse(Reason::MaxTokens, "token cap".into())
            };
        }
        let max_tokens = ask.max_tokens.max(1).min(affordable);
        let worst = Usage {
            output_tokens: max_tokens,
            ..input
        };
        let reserved = Spend::of_usage(&worst, price);
        self.reserved.add(&reserved);
        Ok(Grant {
            max_tokens,
            asked: ask.max_tokens,
            reserved,
            input_bound: ask.input_bound,
            price,
        })
    }

    /// A call ended: its reservation is taken back, what it cost is
    /// settled.
    pub fn settle(&mut self, grant: &Grant, cost: &Spend) {
        self.reserved = self.reserved.minus(&grant.reserved);
        self.settled.add(cost);
        self.calls += 1;
    }

    /// A call refused after its reservation (it never reached upstream).
    pub fn release(&mut self, grant: &Grant) {
        self.reserved = self.reserved.minus(&grant.reserved);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PRICE: Price = Price {
        input: 4.0,
        output: 20.0,
        cache_read: 0.4,
        cache_write: 5.0,
    };

    fn ask(max_tokens: u64, input_bound: u64) -> Ask {
        Ask {
            model: "opus".into(),
            max_tokens,
            input_bound,
        }
    }

    fn limits(usd: f64) -> Limits {
        Limits {
            budget_usd: usd,
            max_turns: 1000,
            max_tokens: u64::MAX,
        }
    }

    #[test]
    fn concurrent_reservations_see_each_other() {
        // $0.5: one call of 10k input + 10k output costs at most
        // 10k*4*1.25/1e6 + 10k*20/1e6 = 0.05 + 0.2 = 0.25.
        let mut l = Ledger::new(limits(0.5), Spend::default());
        let a = l.reserve(&ask(10_000, 10_000), PRICE).expect("first fits");
        let b = l.reserve(&ask(10_000, 10_000), PRICE).expect("second fits");
        assert_eq!((a.max_tokens, b.max_tokens), (10_000, 10_000));
        // The third's input alone is 0.05; nothing is left for output.
        let c = l.reserve(&ask(10_000, 10_000), PRICE);
        assert_eq!(c.map_err(|r| r.reason), Err(Reason::BudgetUsd));
        // One settles cheaply: room again.
        l.settle(
            &a,
            &Spend {
                cost_usd: 0.01,
                turns: 1,
                input_tokens: 100,
                output_tokens: 100,
            },
        );
        let d = l.reserve(&ask(10_000, 10_000), PRICE).expect("room again");
        assert!(d.max_tokens <= 10_000);
        assert!(l.spent().plus(&l.reserved()).cost_usd <= 0.5 + 1e-12);
    }

    #[test]
    fn an_output_bound_that_does_not_fit_is_clamped_then_refused() {
        let mut l = Ledger::new(limits(0.1), Spend::default());
        // 0.1 - input 0.0005 leaves 4975 output tokens at $20/M.
        let g = l.reserve(&ask(128_000, 100), PRICE).expect("clamped");
        assert_eq!(g.max_tokens, 4975);
        assert!(g.reserved.cost_usd <= 0.1 + 1e-12);
        // What is left cannot give even MIN_GRANT tokens.
        let r = l.reserve(&ask(128_000, 100), PRICE).expect_err("refused");
        assert_eq!(r.reason, Reason::BudgetUsd);
        // A small ask that fits exactly is not clamped.
        let mut l = Ledger::new(limits(0.1), Spend::default());
        assert_eq!(
            l.reserve(&ask(50, 100), PRICE).expect("fits").max_tokens,
            50
        );
    }

    #[test]
    fn turns_and_tokens_are_reserved_too() {
        let mut l = Ledger::new(
            Limits {
                budget_usd: 100.0,
                max_turns: 2,
                max_tokens: 30_000,
            },
            Spend {
                turns: 1,
                ..Spend::default()
            },
        );
        let g = l
            .reserve(&ask(50_000, 10_000), PRICE)
            .expect("one turn left");
        assert_eq!(
            g.max_tokens, 20_000,
            "tokens cap leaves 20k after the input"
        );
        let r = l.reserve(&ask(10, 10), PRICE).expect_err("no turn left");
        assert_eq!(r.reason, Reason::MaxTurns);
    }

    #[test]
    fn a_call_without_its_final_usage_costs_its_reservation() {
        let g = Grant {
            max_tokens: 60_000,
            asked: 60_000,
            reserved: Spend::default(),
            input_bound: 5_000,
            price: PRICE,
        };
        let none = g.worst_case(None);
        assert_eq!(
            (none.cache_creation_input_tokens, none.output_tokens),
            (5_000, 60_000)
        );
        let seen = Usage {
            input_tokens: 300,
            output_tokens: 1,
            cache_read_input_tokens: 2_000,
            ..Usage::default()
        };
        let w = g.worst_case(Some(&seen));
        assert_eq!(
            (w.input_tokens, w.cache_read_input_tokens, w.output_tokens),
            (300, 2_000, 60_000)
        );
    }
}
