//! Answers from a model loaded in this process, through the wick library.

use std::io::Write;

use anyhow::Result;
use wick::{ChatRequest, Event};

use super::{Answer, ChatArgs, Conversation, Interrupt, Printer, Responder};

/// A model loaded here.
#[derive(Debug)]
pub(super) struct Local {
    llm: crate::flags::Loaded,
}

impl Local {
    /// Loads the model `-m` names (downloading it when needed), or the default model.
    pub(super) fn load(args: &ChatArgs) -> Result<Self> {
        let llm = crate::flags::load_llm(
            args.model.as_deref(),
            args.chat_template.as_deref(),
            &args.sampling,
            &args.load,
            &args.template,
            args.max_tokens,
        )?;
        Ok(Local { llm })
    }
}

impl Responder for Local {
    fn answer<W: Write>(
        &mut self,
        conversation: &Conversation,
        out: &mut Printer<W>,
        interrupt: &Interrupt,
    ) -> Result<Answer> {
        let mut request = ChatRequest::new(conversation.messages.clone());
        request.system.clone_from(&conversation.system);
        let stream = self
            .llm
            .stream_chat_with(&request, &wick::GenerateOptions::default())?;
        let mut answer = Answer::default();
        for item in stream {
            // Breaking out drops the stream, which cancels the generation in the engine.
            if interrupt.stopped() {
                break;
            }
            // Items carry events only: the answer so far is their content, accumulated here
            // (an interrupted answer keeps what was shown).
            for event in &item?.events {
                show(event, out)?;
                if let Event::Content(text) = event {
                    answer.content.push_str(text);
                }
            }
        }
        Ok(answer)
    }
}

fn show<W: Write>(event: &Event, out: &mut Printer<W>) -> std::io::Result<()> {
    match event {
        Event::Content(text) => out.content(text),
        Event::Reasoning(text) => out.reasoning(text),
        Event::ToolCallStart { name, .. } => out.tool_call_start(name),
        Event::ToolCallArgs { text, .. } => out.tool_call_args(text),
        _ => Ok(()),
    }
}
