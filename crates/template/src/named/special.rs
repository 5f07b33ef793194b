//! Templates with a rule of their own: system messages merged into a user turn (gemma,
//! orion), a first system message treated apart (gigachat, bailing2, hunyuan, pangu), role
//! names re-spelled (openchat, bailing), or a reply prompt tied to the last message (rwkv).

use wick_types::Message;

use super::prompt::{role, trim, Prompt};

/// gemma: `assistant` is `model`; system messages (trimmed, run together) go at the top of
/// the next non-model turn, followed by a blank line.
pub(super) fn gemma(p: &mut Prompt, messages: &[Message], add_generation: bool) {
    let mut system = String::new();
    for m in messages {
        if role(m) == "system" {
            system.push_str(trim(&m.content));
            continue;
        }
        let is_model = matches!(role(m), "assistant" | "model");
        p.ctl("<start_of_turn>");
        if role(m) == "assistant" {
            p.ctl("model");
        } else {
            p.role(m);
        }
        p.ctl("\n");
        if !system.is_empty() && !is_model {
            p.text(&system).ctl("\n\n");
            system.clear();
        }
        p.text(trim(&m.content)).ctl("<end_of_turn>\n");
    }
    if add_generation {
        p.ctl("<start_of_turn>model\n");
    }
}

/// orion: system messages are held for the next user turn; every role but system and user
/// is the assistant. No generation prompt (each user turn already ends in `Assistant: </s>`).
pub(super) fn orion(p: &mut Prompt, messages: &[Message]) {
    let mut system = String::new();
    for m in messages {
        match role(m) {
            "system" => system.push_str(&m.content),
            "user" => {
                p.ctl("Human: ");
                if !system.is_empty() {
                    p.text(&system).ctl("\n\n");
                    system.clear();
                }
                p.text(&m.content).ctl("\n\nAssistant: </s>");
            }
            _ => {
                p.text(&m.content).ctl("</s>");
            }
        }
    }
}

/// openchat: `GPT4 Correct ` + the role name with its first letter upper-cased; a system
/// message is its bare content.
pub(super) fn openchat(p: &mut Prompt, messages: &[Message], add_generation: bool) {
    for m in messages {
        if role(m) == "system" {
            p.text(&m.content).ctl("<|end_of_turn|>");
            continue;
        }
        let name = capitalize_ascii(role(m));
        p.ctl("GPT4 Correct ").role_as(&m.role, &name).ctl(": ");
        p.text(&m.content).ctl("<|end_of_turn|>");
    }
    if add_generation {
        p.ctl("GPT4 Correct Assistant:");
    }
}

/// The C-locale `toupper` of the first byte: ASCII letters only.
fn capitalize_ascii(name: &str) -> String {
    let mut out = name.to_owned();
    if let Some(first) = out.get_mut(..1) {
        first.make_ascii_uppercase();
    }
    out
}

/// minicpm: `<用户>` + user text + `<AI>`; everything else is bare text; all trimmed; no
/// generation prompt (a user turn already ends in `<AI>`).
pub(super) fn minicpm(p: &mut Prompt, messages: &[Message]) {
    for m in messages {
        if role(m) == "user" {
            p.ctl("<用户>").text(trim(&m.content)).ctl("<AI>");
        } else {
            p.text(trim(&m.content));
        }
    }
}

/// rwkv-world: `Role: text` blocks separated by blank lines (`\n\n` is the model's end of
/// turn), all trimmed; `Assistant:` follows a final user message whatever
/// `add_generation_prompt` says; other roles are dropped.
pub(super) fn rwkv_world(p: &mut Prompt, messages: &[Message]) {
    for (i, m) in messages.iter().enumerate() {
        let label = match role(m) {
            "system" => "System: ",
            "user" => "User: ",
            "assistant" => "Assistant: ",
            _ => continue,
        };
        p.ctl(label).text(trim(&m.content)).ctl("\n\n");
        if role(m) == "user" && i + 1 == messages.len() {
            p.ctl("Assistant:");
        }
    }
}

/// The first message when it is a system message, and the rest.
fn split_system(messages: &[Message]) -> (Option<&Message>, &[Message]) {
    match messages.split_first() {
        Some((first, rest)) if role(first) == "system" => (Some(first), rest),
        _ => (None, messages),
    }
}

/// gigachat: a first system message goes right after `<s>`; later system messages and
/// other roles are dropped; every user turn announces an empty function list.
pub(super) fn gigachat(p: &mut Prompt, messages: &[Message], add_generation: bool) {
    let (system, rest) = split_system(messages);
    p.ctl("<s>");
    if let Some(s) = system {
        p.text(&s.content).ctl("<|message_sep|>");
    }
    for m in rest {
        match role(m) {
            "user" => {
                p.ctl("user<|role_sep|>").text(&m.content);
                p.ctl("<|message_sep|>available functions<|role_sep|>[]<|message_sep|>");
            }
            "assistant" => {
                p.ctl("assistant<|role_sep|>").text(&m.content);
                p.ctl("<|message_sep|>");
            }
            _ => {}
        }
    }
    if add_generation {
        p.ctl("assistant<|role_sep|>");
    }
}

/// The bailing role name: `HUMAN` for user, otherwise the name in ASCII upper case.
fn bailing_role(p: &mut Prompt, m: &Message) {
    p.ctl("<role>");
    if role(m) == "user" {
        p.ctl("HUMAN");
    } else {
        p.role_as(&m.role, &role(m).to_ascii_uppercase());
    }
    p.ctl("</role>");
}

/// bailing (`think == false`) and bailing-think (the generation prompt opens `<think>`).
pub(super) fn bailing(p: &mut Prompt, messages: &[Message], add_generation: bool, think: bool) {
    for m in messages {
        bailing_role(p, m);
        p.text(&m.content);
    }
    if add_generation {
        p.ctl("<role>ASSISTANT</role>");
        if think {
            p.ctl("<think>");
        }
    }
}

/// bailing2: like bailing with `<|role_end|>` after each message, and a default system turn
/// (`detailed thinking off`) when the first message is not a system message.
pub(super) fn bailing2(p: &mut Prompt, messages: &[Message], add_generation: bool) {
    if split_system(messages).0.is_none() {
        p.ctl("<role>SYSTEM</role>detailed thinking off<|role_end|>");
    }
    for m in messages {
        bailing_role(p, m);
        p.text(&m.content).ctl("<|role_end|>");
    }
    if add_generation {
        p.ctl("<role>ASSISTANT</role>");
    }
}

/// hunyuan-dense: a first system message is bare text + `<｜hy_place▁holder▁no▁3｜>`; user
/// turns end by opening the assistant turn; no generation prompt; other roles are dropped.
pub(super) fn hunyuan_dense(p: &mut Prompt, messages: &[Message]) {
    let (system, rest) = split_system(messages);
    if let Some(s) = system {
        p.text(&s.content).ctl("<｜hy_place▁holder▁no▁3｜>");
    }
    for m in rest {
        match role(m) {
            "assistant" => {
                p.ctl("<｜hy_Assistant｜>").text(&m.content);
                p.ctl("<｜hy_place▁holder▁no▁2｜>");
            }
            "user" => {
                p.ctl("<｜hy_User｜>")
                    .text(&m.content)
                    .ctl("<｜hy_Assistant｜>");
            }
            _ => {}
        }
    }
}

/// hunyuan-vl: `<｜hy_begin▁of▁sentence｜>`, a first system message as in hunyuan-dense, then
/// each user or assistant text followed by its role marker; no generation prompt.
pub(super) fn hunyuan_vl(p: &mut Prompt, messages: &[Message]) {
    p.ctl("<｜hy_begin▁of▁sentence｜>");
    let (system, rest) = split_system(messages);
    if let Some(s) = system {
        p.text(&s.content).ctl("<｜hy_place▁holder▁no▁3｜>");
    }
    for m in rest {
        match role(m) {
            "user" => {
                p.text(&m.content).ctl("<｜hy_User｜>");
            }
            "assistant" => {
                p.text(&m.content).ctl("<｜hy_Assistant｜>");
            }
            _ => {}
        }
    }
}

/// pangu-embedded: `[unused9]角色：text[unused10]` per message, with an empty system turn
/// first when the first message is not a system message; roles other than system, user,
/// assistant, tool and function are dropped.
pub(super) fn pangu_embedded(p: &mut Prompt, messages: &[Message], add_generation: bool) {
    if messages.first().is_some_and(|m| role(m) != "system") {
        p.ctl("[unused9]系统：[unused10]");
    }
    for m in messages {
        let open = match role(m) {
            "system" => "[unused9]系统：",
            "user" => "[unused9]用户：",
            "assistant" => "[unused9]助手：",
            "tool" => "[unused9]工具：",
            "function" => "[unused9]方法：",
            _ => continue,
        };
        p.ctl(open).text(&m.content).ctl("[unused10]");
    }
    if add_generation {
        p.ctl("[unused9]助手：");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capitalize_touches_only_an_ascii_first_letter() {
        assert_eq!(capitalize_ascii("user"), "User");
        assert_eq!(capitalize_ascii(""), "");
        assert_eq!(capitalize_ascii("élan"), "élan");
    }
}
