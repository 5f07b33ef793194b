//! Printing an answer as it streams: reasoning dimmed and apart from the content, tool calls
//! as `tool call NAME(ARGS)`.

use std::io::{self, Write};

const DIM: &str = "\x1b[2m";
const RESET: &str = "\x1b[0m";

/// The part of the answer being printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Section {
    /// Nothing printed yet.
    Start,
    Reasoning,
    Content,
    /// Inside `tool call NAME(`: the arguments come next.
    ToolCall,
}

/// Writes one answer's pieces to `out`, each kind in its own section. With `styled`, reasoning
/// is dimmed with ANSI codes; without, it is framed as `[reasoning] …` on its own line.
#[derive(Debug)]
pub(super) struct Printer<W: Write> {
    out: W,
    styled: bool,
    section: Section,
    /// Whether the current section has printed only whitespace so far (trimmed away).
    section_empty: bool,
}

impl<W: Write> Printer<W> {
    pub(super) fn new(out: W, styled: bool) -> Self {
        Printer {
            out,
            styled,
            section: Section::Start,
            section_empty: true,
        }
    }

    /// Reasoning text.
    pub(super) fn reasoning(&mut self, text: &str) -> io::Result<()> {
        if self.section != Section::Reasoning {
            self.close_section()?;
            let open = if self.styled { DIM } else { "[reasoning] " };
            self.out.write_all(open.as_bytes())?;
            self.section = Section::Reasoning;
        }
        self.text(text)
    }

    /// Answer text.
    pub(super) fn content(&mut self, text: &str) -> io::Result<()> {
        if self.section != Section::Content {
            self.close_section()?;
            self.section = Section::Content;
        }
        self.text(text)
    }

    /// A tool call begins: prints `tool call NAME(`.
    pub(super) fn tool_call_start(&mut self, name: &str) -> io::Result<()> {
        self.close_section()?;
        write!(self.out, "tool call {name}(")?;
        self.section = Section::ToolCall;
        self.section_empty = false;
        self.out.flush()
    }

    /// A fragment of the current tool call's arguments.
    pub(super) fn tool_call_args(&mut self, text: &str) -> io::Result<()> {
        if self.section != Section::ToolCall {
            // Arguments without a start (a lenient server): print them as their own call.
            self.tool_call_start("?")?;
        }
        self.out.write_all(text.as_bytes())?;
        self.out.flush()
    }

    /// Ends the answer: closes the open section and the line. Ready for the next answer.
    pub(super) fn finish(&mut self) -> io::Result<()> {
        self.close_section()?;
        self.section = Section::Start;
        self.out.flush()
    }

    /// Writes section text, dropping the whitespace a section starts with.
    fn text(&mut self, text: &str) -> io::Result<()> {
        let text = if self.section_empty {
            text.trim_start()
        } else {
            text
        };
        if !text.is_empty() {
            self.section_empty = false;
            self.out.write_all(text.as_bytes())?;
        }
        self.out.flush()
    }

    /// Ends the current section with its closing and a line break.
    fn close_section(&mut self) -> io::Result<()> {
        let closing = match self.section {
            Section::Start => return Ok(()),
            Section::Reasoning if self.styled => RESET,
            Section::ToolCall => ")",
            Section::Reasoning | Section::Content => "",
        };
        self.out.write_all(closing.as_bytes())?;
        self.out.write_all(b"\n")?;
        self.section = Section::Start;
        self.section_empty = true;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn printed(
        styled: bool,
        f: impl FnOnce(&mut Printer<&mut Vec<u8>>) -> io::Result<()>,
    ) -> String {
        let mut out = Vec::new();
        let mut p = Printer::new(&mut out, styled);
        f(&mut p).unwrap();
        p.finish().unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn plain_reasoning_is_framed_on_its_own_line() {
        let text = printed(false, |p| {
            p.reasoning("\nLet me ")?;
            p.reasoning("think.")?;
            p.content("\n\nThe answer")?;
            p.content(" is 4.")
        });
        assert_eq!(text, "[reasoning] Let me think.\nThe answer is 4.\n");
    }

    #[test]
    fn styled_reasoning_is_dimmed_and_reset() {
        let text = printed(true, |p| {
            p.reasoning("hmm")?;
            p.content("4")
        });
        assert_eq!(text, "\x1b[2mhmm\x1b[0m\n4\n");
    }

    #[test]
    fn tool_calls_print_name_and_arguments() {
        let text = printed(false, |p| {
            p.content("Checking.")?;
            p.tool_call_start("get_weather")?;
            p.tool_call_args("{\"city\":")?;
            p.tool_call_args("\"Paris\"}")?;
            p.tool_call_start("now")?;
            p.tool_call_args("{}")
        });
        assert_eq!(
            text,
            "Checking.\ntool call get_weather({\"city\":\"Paris\"})\ntool call now({})\n"
        );
    }

    #[test]
    fn an_empty_answer_prints_nothing_and_answers_do_not_run_together() {
        assert_eq!(printed(false, |_| Ok(())), "");
        let mut out = Vec::new();
        let mut p = Printer::new(&mut out, false);
        p.content("one").unwrap();
        p.finish().unwrap();
        p.content("two").unwrap();
        p.finish().unwrap();
        assert_eq!(out, b"one\ntwo\n");
    }
}
