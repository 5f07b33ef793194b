//! The decomposition: from the probes' gaps to `begin`, per-role prefixes and suffixes, the
//! generation prompt, the end marker and the no-system forms.
//!
//! The equations (one per gap kind):
//!
//! ```text
//! between(a, b)        = suffix[a] + prefix[b]
//! after_final(r, true) = suffix[r] + generation_prompt           (r = system, user)
//! after_final(r,false) = suffix[r] + end                         (r = system, user)
//! after_final(A,false) = final_assistant_suffix + end
//! before_final_A       = suffix[user] + final_assistant_prefix
//! opening(system)      = begin + prefix[system]
//! opening(user)        = begin + (preamble | prefix[system] + implicit + suffix[system]) + prefix[user]
//! ```
//!
//! They fix everything once `end` is chosen. `end` is the shortest text (cut at a token
//! boundary) that solves them — so the text a final message is followed by is its suffix.
//! When `end` is not empty, a turn opener the suffixes then end with (`<|start_header_id|>`)
//! moves to the following texts. `begin` is the longest start common to both openings that
//! ends where a turn ends (nothing, the BOS text, or a role's suffix). Every candidate is
//! checked by the caller.

use super::probe::{Observations, Role};
use crate::RoleTemplate;

/// The solved texts, before content transforms and verification.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(super) struct Parts {
    pub(super) begin: String,
    pub(super) prefix: [Option<String>; 3],
    pub(super) suffix: [Option<String>; 3],
    pub(super) generation_prompt: String,
    pub(super) end: String,
    pub(super) implicit_system: Option<String>,
    pub(super) no_system_preamble: String,
    pub(super) final_assistant_prefix: Option<String>,
    pub(super) final_assistant_suffix: Option<String>,
}

impl Parts {
    pub(super) fn into_template(self) -> RoleTemplate {
        let mut t = RoleTemplate {
            begin: self.begin,
            generation_prompt: self.generation_prompt,
            end: self.end,
            implicit_system: self.implicit_system,
            no_system_preamble: self.no_system_preamble,
            final_assistant_prefix: self.final_assistant_prefix,
            final_assistant_suffix: self.final_assistant_suffix,
            ..RoleTemplate::default()
        };
        for (i, role) in Role::ALL.iter().enumerate() {
            if let Some(p) = &self.prefix[i] {
                t.prefix.insert(role.as_str().to_owned(), p.clone());
            }
            if let Some(s) = &self.suffix[i] {
                t.suffix.insert(role.as_str().to_owned(), s.clone());
            }
        }
        t
    }
}

/// Byte offsets where `text` may be cut: char boundaries not inside a special-token-like
/// span (`<|…|>`, `<…>`, `[…]`), in increasing order.
pub(super) fn boundaries(text: &str) -> Vec<usize> {
    let bytes = text.as_bytes();
    let mut inside = vec![false; text.len() + 1];
    let mut i = 0;
    while i < bytes.len() {
        let close = match bytes[i] {
            b'<' => b'>',
            b'[' => b']',
            _ => {
                i += 1;
                continue;
            }
        };
        let span = bytes[i + 1..]
            .iter()
            .take(64)
            .position(|&c| c == close || c == b'<' || c == b'[' || c.is_ascii_whitespace());
        match span {
            Some(len) if len > 0 && bytes[i + 1 + len] == close => {
                let end = i + 1 + len + 1;
                for flag in &mut inside[i + 1..end] {
                    *flag = true;
                }
                i = end;
            }
            _ => i += 1,
        }
    }
    (0..=text.len())
        .filter(|&k| text.is_char_boundary(k) && !inside[k])
        .collect()
}

/// The longest common prefix of `a` and `b`, cut back to a boundary of both.
pub(super) fn common_prefix<'a>(a: &'a str, b: &str) -> &'a str {
    let n = a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count();
    let ba = boundaries(a);
    let bb = boundaries(b);
    let cut = ba
        .iter()
        .rev()
        .find(|&&k| k <= n && bb.binary_search(&k).is_ok())
        .copied()
        .unwrap_or(0);
    &a[..cut]
}

/// The longest common suffix of `texts`, cut at a boundary of each.
fn common_suffix(texts: &[&str]) -> usize {
    let Some(first) = texts.first() else {
        return 0;
    };
    let n = (0..=first.len())
        .take_while(|&k| {
            texts.iter().all(|t| {
                t.len() >= k && t.as_bytes()[t.len() - k..] == first.as_bytes()[first.len() - k..]
            })
        })
        .last()
        .unwrap_or(0);
    (0..=n)
        .rev()
        .find(|&k| {
            texts
                .iter()
                .all(|t| boundaries(t).binary_search(&(t.len() - k)).is_ok())
        })
        .unwrap_or(0)
}

fn idx(role: Role) -> usize {
    Role::ALL
        .iter()
        .position(|r| *r == role)
        .expect("invariant: a known role")
}

/// The candidate `end` markers, shortest first: suffixes of the text after a final user
/// message (no generation prompt) starting at a boundary.
pub(super) fn end_candidates(obs: &Observations) -> Vec<String> {
    let Some(after) = obs.after_final(Role::User, false) else {
        return Vec::new();
    };
    boundaries(after)
        .into_iter()
        .rev()
        .map(|k| after[k..].to_owned())
        .collect()
}

/// Solves the equations for this `end`, or `None` when they have no solution with it.
pub(super) fn solve(obs: &Observations, end: &str, has_system: bool) -> Option<Parts> {
    let mut p = Parts {
        end: end.to_owned(),
        ..Parts::default()
    };
    let s_user = obs.after_final(Role::User, false)?.strip_suffix(end)?;
    obs.after_final(Role::User, true)?
        .strip_prefix(s_user)?
        .clone_into(&mut p.generation_prompt);
    let p_assistant = obs
        .between(Role::User, Role::Assistant)?
        .strip_prefix(s_user)?;
    let final_assistant = obs.after_final(Role::Assistant, false)?.strip_suffix(end)?;
    let p_user = match (has_system, obs.after_final(Role::System, false)) {
        (true, Some(after)) => {
            let s_system = after.strip_suffix(end)?;
            obs.between(Role::System, Role::User)?
                .strip_prefix(s_system)?
        }
        _ => obs
            .between(Role::Assistant, Role::User)?
            .strip_prefix(final_assistant)?,
    };
    let s_assistant = obs
        .between(Role::Assistant, Role::User)?
        .strip_suffix(p_user)?;
    let fp = obs.before_final_assistant()?.strip_prefix(s_user)?;
    p.final_assistant_prefix = (fp != p_assistant).then(|| fp.to_owned());
    p.final_assistant_suffix = (final_assistant != s_assistant).then(|| final_assistant.to_owned());
    p.prefix[idx(Role::User)] = Some(p_user.to_owned());
    p.suffix[idx(Role::User)] = Some(s_user.to_owned());
    p.prefix[idx(Role::Assistant)] = Some(p_assistant.to_owned());
    p.suffix[idx(Role::Assistant)] = Some(s_assistant.to_owned());
    let opening_user = obs.opening(Role::User)?.strip_suffix(p_user)?;
    if has_system {
        let s_system = obs
            .between(Role::System, Role::User)?
            .strip_suffix(p_user)?;
        p.suffix[idx(Role::System)] = Some(s_system.to_owned());
        solve_opening(&mut p, obs, opening_user)?;
    } else {
        opening_user.clone_into(&mut p.begin);
    }
    Some(p)
}

/// `begin`, the system prefix, and the implicit system message or no-system preamble.
fn solve_opening(p: &mut Parts, obs: &Observations, opening_user: &str) -> Option<()> {
    let opening_system = obs.opening(Role::System)?;
    let common = common_prefix(opening_system, obs.opening(Role::User)?);
    let s_system = p.suffix[idx(Role::System)].clone()?;
    let (begin, p_system, rest) = begin_candidates(p, common, obs.bos.as_deref())
        .into_iter()
        .find_map(|begin| {
            let p_system = opening_system.strip_prefix(begin)?;
            let rest = opening_user.strip_prefix(begin)?;
            Some((begin, p_system, rest))
        })?;
    let implicit = rest
        .strip_prefix(p_system)
        .and_then(|r| r.strip_suffix(s_system.as_str()))
        .filter(|_| rest.len() >= p_system.len() + s_system.len());
    if !rest.is_empty() {
        p.implicit_system = implicit.map(ToOwned::to_owned);
        rest.clone_into(&mut p.no_system_preamble);
    }
    p.begin = begin.to_owned();
    p.prefix[idx(Role::System)] = Some(p_system.to_owned());
    Some(())
}

/// The starts of `common` (the openings' common start) that end where a turn ends, longest
/// first: the BOS text, a start ending with a role's suffix (any, when a suffix is empty),
/// or nothing.
fn begin_candidates<'a>(p: &Parts, common: &'a str, bos: Option<&str>) -> Vec<&'a str> {
    let suffixes: Vec<&str> = p.suffix.iter().flatten().map(String::as_str).collect();
    boundaries(common)
        .into_iter()
        .rev()
        .map(|k| &common[..k])
        .filter(|b| b.is_empty() || bos == Some(*b) || suffixes.iter().any(|s| b.ends_with(s)))
        .collect()
}

/// Longer `end` markers that move a turn opener out of every suffix: the common ends of the
/// suffixes that leave each suffix non-empty, longest first.
pub(super) fn opener_moves(p: &Parts) -> Vec<String> {
    let mut suffixes: Vec<&str> = p.suffix.iter().flatten().map(String::as_str).collect();
    if let Some(fs) = &p.final_assistant_suffix {
        suffixes.push(fs);
    }
    let shortest = suffixes.iter().map(|s| s.len()).min().unwrap_or(0);
    let common = common_suffix(&suffixes);
    let Some(first) = suffixes.first() else {
        return Vec::new();
    };
    let tail = &first[first.len() - common..];
    boundaries(tail)
        .into_iter()
        .filter(|&k| k < tail.len() && tail.len() - k < shortest)
        .map(|k| format!("{}{}", &tail[k..], p.end))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boundaries_skip_token_interiors() {
        let text = "<|im_end|>\n[INST]x";
        let b = boundaries(text);
        assert_eq!(b, [0, 10, 11, 17, 18]);
        assert_eq!(
            common_prefix("<|im_start|>user", "<|im_start|>system"),
            "<|im_start|>"
        );
        assert_eq!(common_prefix("<|user|>", "<|system|>"), "");
        assert_eq!(common_prefix("a < b", "a < c"), "a < ");
    }

    #[test]
    fn common_suffixes_end_on_boundaries() {
        assert_eq!(common_suffix(&["x<|eot|><|sh|>", "<|eot|><|sh|>"]), 13);
        assert_eq!(common_suffix(&["<|a_end|>", "<|b_end|>"]), 0);
    }
}
