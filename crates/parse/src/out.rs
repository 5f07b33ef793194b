//! The event sink the state machines write to: merges adjacent text, numbers calls, hands
//! out ids.

use crate::event::Event;
use crate::ids::IdGen;

/// Collects the events of one `feed`/`finish` call.
#[derive(Debug, Clone)]
pub(crate) struct Out {
    pub(crate) events: Vec<Event>,
    calls: usize,
    pub(crate) ids: IdGen,
}

impl Out {
    pub(crate) fn new(ids: IdGen) -> Self {
        Out {
            events: Vec::new(),
            calls: 0,
            ids,
        }
    }

    /// How many calls were started so far.
    pub(crate) fn calls(&self) -> usize {
        self.calls
    }

    /// Takes over the call count and ids of a sub-parser whose events were adopted.
    pub(crate) fn adopt(&mut self, other: Out) {
        self.calls = other.calls;
        self.ids = other.ids;
        self.events.extend(other.events);
    }

    /// A fresh sink continuing this one's numbering and ids.
    pub(crate) fn fork(&self) -> Out {
        Out {
            events: Vec::new(),
            calls: self.calls,
            ids: self.ids.clone(),
        }
    }

    pub(crate) fn content(&mut self, s: &str) {
        if s.is_empty() {
            return;
        }
        if let Some(Event::Content(last)) = self.events.last_mut() {
            last.push_str(s);
        } else {
            self.events.push(Event::Content(s.to_owned()));
        }
    }

    pub(crate) fn reasoning(&mut self, s: &str) {
        if s.is_empty() {
            return;
        }
        if let Some(Event::Reasoning(last)) = self.events.last_mut() {
            last.push_str(s);
        } else {
            self.events.push(Event::Reasoning(s.to_owned()));
        }
    }

    /// Starts a call; `id` is the model's when the format carries one.
    pub(crate) fn start_call(&mut self, name: &str, id: Option<String>) -> usize {
        let id = match id {
            Some(id) if !id.is_empty() => {
                self.ids.note(&id);
                id
            }
            _ => self.ids.generate(),
        };
        let index = self.calls;
        self.calls += 1;
        self.events.push(Event::ToolCallStart {
            index,
            id,
            name: name.to_owned(),
        });
        index
    }

    /// Appends an arguments fragment to the current call.
    pub(crate) fn args(&mut self, s: &str) {
        if s.is_empty() || self.calls == 0 {
            return;
        }
        let index = self.calls - 1;
        if let Some(Event::ToolCallArgs { index: i, text }) = self.events.last_mut() {
            if *i == index {
                text.push_str(s);
                return;
            }
        }
        self.events.push(Event::ToolCallArgs {
            index,
            text: s.to_owned(),
        });
    }
}
