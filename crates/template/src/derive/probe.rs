//! Probe conversations: fixed shapes of system/user/assistant messages whose contents are
//! sentinels, rendered by the Jinja template and cut at the sentinels into gaps.

use std::fmt;

use serde_json::{json, Value};

use super::{DeriveError, DeriveOptions};
use crate::{JinjaTemplate, RenderRequest};

/// The three roles a role template is derived for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) enum Role {
    System,
    User,
    Assistant,
}

impl Role {
    pub(super) const ALL: [Role; 3] = [Role::System, Role::User, Role::Assistant];

    pub(super) fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
        }
    }

    fn letter(self) -> char {
        match self {
            Role::System => 'S',
            Role::User => 'U',
            Role::Assistant => 'A',
        }
    }
}

use Role::{Assistant as A, System as S, User as U};

/// The conversation shapes probed. Each is rendered with `add_generation_prompt=false`, and
/// with `true` when it ends with a user message.
const SHAPES: &[&[Role]] = &[
    &[S],
    &[U],
    &[S, U],
    &[U, A],
    &[S, U, A],
    &[U, A, U],
    &[S, U, A, U],
    &[U, A, U, A],
    &[S, U, A, U, A, U],
];

/// One probe: a conversation shape and whether a generation prompt is asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Probe {
    pub(super) roles: Vec<Role>,
    pub(super) generation_prompt: bool,
}

impl fmt::Display for Probe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let roles: Vec<&str> = self.roles.iter().map(|r| r.as_str()).collect();
        write!(
            f,
            "{} (add_generation_prompt={})",
            roles.join("/"),
            self.generation_prompt
        )
    }
}

/// How the sentinel contents are dressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Variant {
    /// The bare sentinel.
    Plain,
    /// Every content padded with two spaces on each side.
    Padded,
    /// Only the contents of one role padded.
    PaddedRole(Role),
    /// Contents spanning several lines, with inner blank lines and indentation.
    MultiLine,
}

impl Variant {
    pub(super) fn name(self) -> &'static str {
        match self {
            Variant::Plain => "plain",
            Variant::Padded | Variant::PaddedRole(_) => "whitespace-padded",
            Variant::MultiLine => "multi-line",
        }
    }

    fn dress(self, role: Role, core: &str) -> String {
        match self {
            Variant::Padded => format!("  {core}  "),
            Variant::PaddedRole(r) if r == role => format!("  {core}  "),
            Variant::Plain | Variant::PaddedRole(_) => core.to_owned(),
            Variant::MultiLine => format!("{core} line one\n\n  line two  \nline three"),
        }
    }
}

impl Probe {
    /// Every probe, in a fixed order.
    pub(super) fn all() -> Vec<Probe> {
        let mut out = Vec::new();
        for shape in SHAPES {
            for generation_prompt in [false, true] {
                if generation_prompt && shape.last() != Some(&U) {
                    continue;
                }
                out.push(Probe {
                    roles: shape.to_vec(),
                    generation_prompt,
                });
            }
        }
        out
    }

    /// Whether the template must render this probe (it has a user message).
    pub(super) fn required(&self) -> bool {
        self.roles.contains(&U)
    }

    pub(super) fn has(&self, role: Role) -> bool {
        self.roles.contains(&role)
    }

    /// The sentinel of message `index`: unique in the conversation and in any template.
    pub(super) fn sentinel(&self, index: usize) -> String {
        format!("QQ{}{}XQ", self.roles[index].letter(), index + 1)
    }

    /// The request of this probe with its contents dressed as `variant`.
    pub(super) fn request(&self, variant: Variant, options: &DeriveOptions) -> RenderRequest {
        let messages: Vec<Value> = self
            .roles
            .iter()
            .enumerate()
            .map(|(i, r)| json!({"role": r.as_str(), "content": variant.dress(*r, &self.sentinel(i))}))
            .collect();
        RenderRequest {
            messages,
            tools: options.tools.clone(),
            bos_token: options.bos_token.clone(),
            eos_token: options.eos_token.clone(),
            add_generation_prompt: self.generation_prompt,
            continue_final_message: false,
            extra_context: options.extra_context.clone(),
        }
    }

    /// Cuts a plain rendering at the sentinels: the `n + 1` texts around the `n` contents.
    ///
    /// # Errors
    /// [`DeriveError::ContentNotOnce`] when a content is missing or repeated,
    /// [`DeriveError::Reordered`] when the contents are out of order.
    pub(super) fn gaps(&self, rendered: &str) -> Result<Vec<String>, DeriveError> {
        let mut positions = Vec::with_capacity(self.roles.len());
        for (i, role) in self.roles.iter().enumerate() {
            let s = self.sentinel(i);
            let count = rendered.matches(&s).count();
            if count != 1 {
                return Err(DeriveError::ContentNotOnce {
                    probe: self.to_string(),
                    role: role.as_str(),
                    index: i,
                    count,
                });
            }
            let at = rendered.find(&s).expect("invariant: counted once");
            positions.push((at, at + s.len(), i));
        }
        let mut sorted = positions.clone();
        sorted.sort_unstable();
        if sorted != positions {
            let order: Vec<&str> = sorted
                .iter()
                .map(|(_, _, i)| self.roles[*i].as_str())
                .collect();
            return Err(DeriveError::Reordered {
                probe: self.to_string(),
                order: order.join("/"),
            });
        }
        let mut gaps = Vec::with_capacity(positions.len() + 1);
        let mut from = 0;
        for (start, end, _) in positions {
            gaps.push(rendered[from..start].to_owned());
            from = end;
        }
        gaps.push(rendered[from..].to_owned());
        Ok(gaps)
    }
}

/// A probe's plain rendering, cut into gaps.
#[derive(Debug, Clone)]
pub(super) struct Observation {
    pub(super) probe: Probe,
    pub(super) gaps: Vec<String>,
}

/// The probes' plain renderings, and lookups of the texts the decomposition needs.
#[derive(Debug, Clone)]
pub(super) struct Observations {
    pub(super) list: Vec<Observation>,
    /// The BOS text the probes were rendered with.
    pub(super) bos: Option<String>,
}

impl Observations {
    fn find(&self, roles: &[Role], generation_prompt: bool) -> Option<&Observation> {
        self.list
            .iter()
            .find(|o| o.probe.roles == roles && o.probe.generation_prompt == generation_prompt)
    }

    /// The gap before the first content of the shortest probe starting with `first` that
    /// asks for a generation prompt.
    pub(super) fn opening(&self, first: Role) -> Option<&str> {
        let shape: &[Role] = if first == S { &[S, U] } else { &[U] };
        self.find(shape, true).map(|o| o.gaps[0].as_str())
    }

    /// The text after a single final `role` message (`[role]`, or `[user, assistant]`).
    pub(super) fn after_final(&self, role: Role, generation_prompt: bool) -> Option<&str> {
        let shape: &[Role] = match role {
            S => &[S],
            U => &[U],
            A => &[U, A],
        };
        self.find(shape, generation_prompt)
            .map(|o| o.gaps.last().expect("invariant: gaps").as_str())
    }

    /// The text before a final assistant message (no generation prompt) after a user message.
    pub(super) fn before_final_assistant(&self) -> Option<&str> {
        self.find(&[U, A], false).map(|o| o.gaps[1].as_str())
    }

    /// The text between a `from` message and a following `to` message, neither of them last.
    pub(super) fn between(&self, from: Role, to: Role) -> Option<&str> {
        let shape: &[Role] = match (from, to) {
            (S, U) => &[S, U],
            (U, A) | (A, U) => &[U, A, U],
            _ => return None,
        };
        let o = self.find(shape, true)?;
        let i = o.probe.roles.windows(2).position(|w| w == [from, to])?;
        Some(o.gaps[i + 1].as_str())
    }
}

/// Renders `probe` as `variant`.
pub(super) fn render(
    template: &JinjaTemplate,
    probe: &Probe,
    variant: Variant,
    options: &DeriveOptions,
) -> Result<String, crate::TemplateError> {
    template.render(&probe.request(variant, options))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probes_cover_both_prompt_modes_but_no_generation_after_assistant() {
        let all = Probe::all();
        assert_eq!(all.len(), 14);
        assert!(all
            .iter()
            .all(|p| !p.generation_prompt || p.roles.last() == Some(&U)));
        assert_eq!(all.iter().filter(|p| !p.required()).count(), 1);
    }

    #[test]
    fn gaps_cut_at_sentinels_and_reject_reordering() {
        let p = Probe {
            roles: vec![S, U],
            generation_prompt: true,
        };
        let text = format!("<a>{}<b>{}<c>", p.sentinel(0), p.sentinel(1));
        assert_eq!(p.gaps(&text).unwrap(), ["<a>", "<b>", "<c>"]);
        let swapped = format!("{}{}", p.sentinel(1), p.sentinel(0));
        assert!(matches!(
            p.gaps(&swapped),
            Err(DeriveError::Reordered { .. })
        ));
        let twice = format!("{0}{0}{1}", p.sentinel(0), p.sentinel(1));
        assert!(matches!(
            p.gaps(&twice),
            Err(DeriveError::ContentNotOnce { count: 2, .. })
        ));
    }
}
