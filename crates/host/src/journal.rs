//! The host's journal: the events `GET /events` lists and the ticks `GET /history` lists, each
//! stamped with the seconds since the host started, and forgotten once older than `keep`.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use memvisor_api::{HostEvent, HostEventKind, HostSample};

/// Events kept for `GET /events` (the oldest go first).
const EVENTS_KEPT: usize = 10_000;

/// What the host did and what each tick saw, since it started.
pub struct Journal {
    started: Instant,
    events: VecDeque<HostEvent>,
    history: VecDeque<HostSample>,
}

impl Journal {
    /// An empty journal; its clock starts now.
    pub fn new() -> Journal {
        Journal {
            started: Instant::now(),
            events: VecDeque::new(),
            history: VecDeque::new(),
        }
    }

    /// Seconds since the host started: the stamp of events, ticks and trace lines.
    pub fn seconds(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    /// Records an event (and logs it: warnings for exits that were not asked for and for a VMM
    /// that cannot release).
    pub fn event(&mut self, kind: HostEventKind, vm: Option<&str>, message: String) {
        match (kind, vm) {
            (HostEventKind::Exited | HostEventKind::Refused, Some(name))
                if ![
                    "stopped",
                    "the guest reported success",
                    "the guest shut down",
                ]
                .iter()
                .any(|fine| message.starts_with(fine)) =>
            {
                tracing::warn!("vm {name}: {message}");
            }
            (HostEventKind::BalloonFallback | HostEventKind::BalloonUnusable, Some(name)) => {
                tracing::warn!("vm {name}: {message}")
            }
            (_, Some(name)) => tracing::info!("vm {name}: {message}"),
            (_, None) => tracing::info!("{message}"),
        }
        if self.events.len() == EVENTS_KEPT {
            self.events.pop_front();
        }
        self.events.push_back(HostEvent {
            seconds: self.seconds(),
            kind,
            vm: vm.map(str::to_owned),
            message,
        });
    }

    /// Events after `since` seconds.
    pub fn events(&self, since: f64) -> Vec<HostEvent> {
        self.events
            .iter()
            .filter(|e| e.seconds > since)
            .cloned()
            .collect()
    }

    /// Ticks after `since` seconds.
    pub fn history(&self, since: f64) -> Vec<HostSample> {
        self.history
            .iter()
            .filter(|s| s.seconds > since)
            .cloned()
            .collect()
    }

    /// Records what a tick saw.
    pub fn record_tick(&mut self, tick: HostSample) {
        self.history.push_back(tick);
    }

    /// Forgets ticks and events older than `keep`: what the journal holds stays bounded however
    /// long the host runs.
    pub fn forget_older_than(&mut self, keep: Duration) {
        let horizon = self.seconds() - keep.as_secs_f64();
        while self.history.front().is_some_and(|s| s.seconds < horizon) {
            self.history.pop_front();
        }
        while self.events.front().is_some_and(|e| e.seconds < horizon) {
            self.events.pop_front();
        }
    }
}
