//! Deriving a role template from a Jinja template, and proving it exact on probes.
//!
//! The template is rendered with sentinel contents on probe conversations (with and without
//! a system message, one to six messages, with and without a generation prompt). The texts
//! between the sentinels are decomposed into `begin`, per-role prefixes and suffixes, the
//! generation prompt, the end marker and the extensions (implicit system message, no-system
//! preamble, final assistant wrapping, content trimming per role). The decomposition is then
//! accepted only if it reproduces every probe byte for byte with plain, whitespace-padded and
//! multi-line contents.

mod probe;
mod solve;

use std::collections::HashMap;

use serde_json::{Map, Value};

use crate::{jinja_stops, JinjaTemplate, RoleTemplate, Strip, TemplateError};
use probe::{Observation, Observations, Probe, Role, Variant};

/// The inputs a Jinja template is rendered with while deriving a role template. The date of
/// `strftime_now` is the template's own (see [`JinjaTemplate::with_options`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DeriveOptions {
    /// The BOS token text (`bos_token`), if the model has one.
    pub bos_token: Option<String>,
    /// The EOS token text (`eos_token`), if the model has one.
    pub eos_token: Option<String>,
    /// Tool definitions to render with. When `None` and the template raises without tools, an
    /// empty tool list is used.
    pub tools: Option<Vec<Value>>,
    /// Further template variables.
    pub extra_context: Map<String, Value>,
}

impl DeriveOptions {
    /// Options with these BOS/EOS texts and nothing else.
    pub fn with_tokens(bos_token: Option<String>, eos_token: Option<String>) -> Self {
        DeriveOptions {
            bos_token,
            eos_token,
            ..DeriveOptions::default()
        }
    }
}

/// Why a Jinja template has no exact role template.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DeriveError {
    /// The template fails on a probe conversation it must render.
    #[error("the template fails on the probe {probe}: {source}")]
    Render {
        /// The probe.
        probe: String,
        /// The template's error.
        #[source]
        source: TemplateError,
    },
    /// A message's content is not rendered exactly once (dropped, or repeated).
    #[error("on the probe {probe}, the content of message {index} ({role}) appears {count} times, not once")]
    ContentNotOnce {
        /// The probe.
        probe: String,
        /// The message's role.
        role: &'static str,
        /// The message's index.
        index: usize,
        /// How often its content appears.
        count: usize,
    },
    /// The contents are rendered in another order than the messages.
    #[error("on the probe {probe}, the messages are reordered (rendered order {order})")]
    Reordered {
        /// The probe.
        probe: String,
        /// The roles in rendered order.
        order: String,
    },
    /// No prefix/suffix texts fit the probes: the text between turns depends on more than the
    /// two roles it joins.
    #[error("no per-role prefix/suffix texts fit the template's renderings (the text between two turns depends on more than their roles)")]
    NoDecomposition,
    /// The derived role template renders a probe differently from the Jinja template.
    #[error("on the probe {probe} with {variant} contents, the role template differs from the template at byte {at}: expected {expected:?}, got {got:?}")]
    Mismatch {
        /// The probe.
        probe: String,
        /// How the contents were dressed: `plain`, `whitespace-padded` or `multi-line`.
        variant: &'static str,
        /// The byte offset of the first difference.
        at: usize,
        /// The template's text from there (up to 60 bytes).
        expected: String,
        /// The role template's text from there (up to 60 bytes).
        got: String,
    },
}

/// The Jinja renderings of the kept probes, by probe index and variant.
struct Renders<'a> {
    probes: Vec<Probe>,
    options: &'a DeriveOptions,
    texts: HashMap<(usize, Variant), String>,
}

const VARIANTS: [Variant; 6] = [
    Variant::Plain,
    Variant::Padded,
    Variant::MultiLine,
    Variant::PaddedRole(Role::System),
    Variant::PaddedRole(Role::User),
    Variant::PaddedRole(Role::Assistant),
];

impl RoleTemplate {
    /// Derives the role template that renders every plain conversation exactly as `template`
    /// does, or says why there is none.
    ///
    /// The template is rendered with sentinel contents on probe conversations (with and
    /// without a system message, one to six messages, with and without a generation prompt);
    /// the texts between the sentinels are decomposed into `begin`, per-role prefixes and
    /// suffixes, the generation prompt, `end` and the extensions (implicit system message,
    /// no-system preamble, final assistant wrapping, trimming per role). The result is
    /// returned only if it reproduces every probe byte for byte with plain, whitespace-padded
    /// and multi-line contents. Its `stop` holds the template's end-of-turn markers and the
    /// EOS text. A template that raises on a system message yields a role template without a
    /// system role.
    ///
    /// ```
    /// use wick_template::{DeriveOptions, JinjaTemplate, RoleTemplate};
    ///
    /// let t = JinjaTemplate::new(
    ///     "{{ bos_token }}{% for m in messages %}<|{{ m.role }}|>\n{{ m.content | trim }}<|end|>\n{% endfor %}\
    ///      {% if add_generation_prompt %}<|assistant|>\n{% endif %}",
    /// )?;
    /// let opts = DeriveOptions::with_tokens(Some("<s>".into()), None);
    /// let role = RoleTemplate::derive(&t, &opts).unwrap();
    /// assert_eq!(role.begin, "<s>");
    /// assert_eq!(role.prefix["user"], "<|user|>\n");
    /// assert_eq!(role.suffix["user"], "<|end|>\n");
    /// assert_eq!(role.generation_prompt, "<|assistant|>\n");
    /// # Ok::<(), wick_template::TemplateError>(())
    /// ```
    ///
    /// # Errors
    /// A [`DeriveError`] saying why no role template reproduces `template`.
    pub fn derive(
        template: &JinjaTemplate,
        options: &DeriveOptions,
    ) -> Result<RoleTemplate, DeriveError> {
        let with_tools;
        let options = if options.tools.is_none() && needs_tools(template, options) {
            with_tools = DeriveOptions {
                tools: Some(Vec::new()),
                ..options.clone()
            };
            &with_tools
        } else {
            options
        };
        let (renders, has_system) = Renders::collect(template, options)?;
        let obs = renders.observations()?;
        let mut t = decompose(&obs, &renders, has_system)?;
        choose_strips(&mut t, &renders, has_system)?;
        for v in [Variant::Plain, Variant::Padded, Variant::MultiLine] {
            renders.check(&t, v, |_| true)?;
        }
        t.stop = jinja_stops(template.source());
        if let Some(eos) = &options.eos_token {
            if !eos.is_empty() && !t.stop.contains(eos) {
                t.stop.push(eos.clone());
            }
        }
        Ok(t)
    }
}

/// Whether the template raises on a plain user message without tools but not with `[]`.
fn needs_tools(template: &JinjaTemplate, options: &DeriveOptions) -> bool {
    let probe = Probe {
        roles: vec![Role::User],
        generation_prompt: true,
    };
    let with = DeriveOptions {
        tools: Some(Vec::new()),
        ..options.clone()
    };
    probe::render(template, &probe, Variant::Plain, options).is_err()
        && probe::render(template, &probe, Variant::Plain, &with).is_ok()
}

impl<'a> Renders<'a> {
    /// Renders every probe in every variant. Probes without a user message that fail are
    /// left out; when only probes with a system message fail, the system role is left out.
    fn collect(
        template: &JinjaTemplate,
        options: &'a DeriveOptions,
    ) -> Result<(Self, bool), DeriveError> {
        let all = Probe::all();
        let plain: Vec<_> = all
            .iter()
            .map(|p| probe::render(template, p, Variant::Plain, options))
            .collect();
        let fails = |system: bool| {
            all.iter()
                .zip(&plain)
                .any(|(p, r)| p.required() && p.has(Role::System) == system && r.is_err())
        };
        let has_system = !fails(true);
        let mut kept = Vec::new();
        for (p, r) in all.into_iter().zip(plain) {
            match r {
                Ok(_) if has_system || !p.has(Role::System) => kept.push(p),
                Err(source) if p.required() && !p.has(Role::System) => {
                    return Err(DeriveError::Render {
                        probe: p.to_string(),
                        source,
                    })
                }
                _ => {}
            }
        }
        let mut texts = HashMap::new();
        for (i, p) in kept.iter().enumerate() {
            for v in VARIANTS {
                let text = probe::render(template, p, v, options).map_err(|source| {
                    DeriveError::Render {
                        probe: p.to_string(),
                        source,
                    }
                })?;
                texts.insert((i, v), text);
            }
        }
        let renders = Renders {
            probes: kept,
            options,
            texts,
        };
        Ok((renders, has_system))
    }

    fn observations(&self) -> Result<Observations, DeriveError> {
        let mut list = Vec::with_capacity(self.probes.len());
        for (i, p) in self.probes.iter().enumerate() {
            let gaps = p.gaps(&self.texts[&(i, Variant::Plain)])?;
            list.push(Observation {
                probe: p.clone(),
                gaps,
            });
        }
        Ok(Observations {
            list,
            bos: self.options.bos_token.clone(),
        })
    }

    /// Checks that `t` renders every probe chosen by `which` exactly as the template.
    fn check(
        &self,
        t: &RoleTemplate,
        variant: Variant,
        which: impl Fn(&Probe) -> bool,
    ) -> Result<(), DeriveError> {
        for (i, p) in self.probes.iter().enumerate() {
            if !which(p) {
                continue;
            }
            let expected = &self.texts[&(i, variant)];
            let got = t
                .render(&p.request(variant, self.options))
                .map_or_else(|e| format!("error: {e}"), |s| s.text());
            if &got != expected {
                return Err(mismatch(p, variant, expected, &got));
            }
        }
        Ok(())
    }
}

fn mismatch(p: &Probe, variant: Variant, expected: &str, got: &str) -> DeriveError {
    let at = expected
        .bytes()
        .zip(got.bytes())
        .take_while(|(a, b)| a == b)
        .count();
    let excerpt = |s: &str| {
        let mut start = at.min(s.len());
        while !s.is_char_boundary(start) {
            start -= 1;
        }
        let mut end = (start + 60).min(s.len());
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s[start..end].to_owned()
    };
    DeriveError::Mismatch {
        probe: p.to_string(),
        variant: variant.name(),
        at,
        expected: excerpt(expected),
        got: excerpt(got),
    }
}

/// The shortest `end` whose solution reproduces the plain probes, then the longest turn
/// opener moved out of the suffixes that still does.
fn decompose(
    obs: &Observations,
    renders: &Renders<'_>,
    has_system: bool,
) -> Result<RoleTemplate, DeriveError> {
    let mut first_failure = None;
    for end in solve::end_candidates(obs) {
        let Some(parts) = solve::solve(obs, &end, has_system) else {
            continue;
        };
        let t = parts.clone().into_template();
        match renders.check(&t, Variant::Plain, |_| true) {
            Ok(()) if end.is_empty() => return Ok(t),
            Ok(()) => return Ok(move_opener(obs, renders, has_system, &parts).unwrap_or(t)),
            Err(e) => {
                first_failure.get_or_insert(e);
            }
        }
    }
    Err(first_failure.unwrap_or(DeriveError::NoDecomposition))
}

fn move_opener(
    obs: &Observations,
    renders: &Renders<'_>,
    has_system: bool,
    parts: &solve::Parts,
) -> Option<RoleTemplate> {
    solve::opener_moves(parts).into_iter().find_map(|end| {
        let t = solve::solve(obs, &end, has_system)?.into_template();
        renders.check(&t, Variant::Plain, |_| true).ok()?;
        Some(t)
    })
}

/// Finds how the template trims each role's content, from probes where only that role's
/// contents are padded.
fn choose_strips(
    t: &mut RoleTemplate,
    renders: &Renders<'_>,
    has_system: bool,
) -> Result<(), DeriveError> {
    for role in Role::ALL {
        if role == Role::System && !has_system {
            continue;
        }
        let variant = Variant::PaddedRole(role);
        let mut first_failure = None;
        let mut found = false;
        for mode in [
            None,
            Some(Strip::Strip),
            Some(Strip::Lstrip),
            Some(Strip::Rstrip),
        ] {
            match mode {
                Some(m) => t.content_transform.insert(role.as_str().to_owned(), m),
                None => t.content_transform.remove(role.as_str()),
            };
            match renders.check(t, variant, |p| p.has(role)) {
                Ok(()) => {
                    found = true;
                    break;
                }
                Err(e) => {
                    first_failure.get_or_insert(e);
                }
            }
        }
        if !found {
            return Err(first_failure.expect("invariant: a failure was recorded"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn derive(source: &str) -> Result<RoleTemplate, DeriveError> {
        let t = JinjaTemplate::new(source).unwrap();
        RoleTemplate::derive(
            &t,
            &DeriveOptions::with_tokens(Some("<s>".into()), Some("</s>".into())),
        )
    }

    #[test]
    fn trimming_end_markers_and_system_refusal_are_found() {
        let t = derive(
            "{% if messages[0].role == 'system' %}{{ raise_exception('no system') }}{% endif %}\
             {% for m in messages %}<{{ m.role }}>{{ m.content | trim if m.role == 'user' else m.content }}</t>\n{% endfor %}\
             {% if add_generation_prompt %}<assistant>{% else %}</s>{% endif %}",
        )
        .unwrap();
        assert!(!t.prefix.contains_key("system"));
        assert_eq!(t.prefix["user"], "<user>");
        assert_eq!(t.suffix["assistant"], "</t>\n");
        assert_eq!(t.end, "</s>");
        assert_eq!(t.content_transform.get("user"), Some(&Strip::Strip));
        assert_eq!(t.content_transform.get("assistant"), None);
        assert!(t.stop.contains(&"</s>".to_owned()));
    }

    #[test]
    fn a_system_message_folded_into_the_first_user_turn_is_refused() {
        // llama2: the system text sits inside the first [INST], which has no fixed prefix.
        let e = derive(
            "{% if messages[0].role == 'system' %}{% set sys = '<<SYS>>\\n' + messages[0].content + '\\n<</SYS>>\\n\\n' %}{% set msgs = messages[1:] %}\
             {% else %}{% set sys = '' %}{% set msgs = messages %}{% endif %}\
             {% for m in msgs %}{% if m.role == 'user' %}<s>[INST] {{ sys if loop.first }}{{ m.content }} [/INST]\
             {% else %} {{ m.content }} </s>{% endif %}{% endfor %}",
        )
        .unwrap_err();
        assert!(matches!(
            e,
            DeriveError::Mismatch { .. }
                | DeriveError::NoDecomposition
                | DeriveError::ContentNotOnce { .. }
        ));
    }

    #[test]
    fn dropped_and_reordered_contents_are_refused() {
        let dropped = derive("{% for m in messages if m.role != 'system' %}<{{ m.role }}>{{ m.content }}{% endfor %}");
        assert!(matches!(
            dropped,
            Err(DeriveError::ContentNotOnce { count: 0, .. })
        ));
        let last_first =
            derive("{% for m in messages | reverse %}<{{ m.role }}>{{ m.content }}{% endfor %}");
        assert!(matches!(last_first, Err(DeriveError::Reordered { .. })));
    }

    #[test]
    fn templates_that_raise_on_plain_chat_are_refused() {
        let e = derive("{{ raise_exception('no') }}").unwrap_err();
        assert!(matches!(e, DeriveError::Render { .. }));
    }
}
