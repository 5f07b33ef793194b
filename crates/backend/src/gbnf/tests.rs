use proptest::prelude::*;

use super::*;

/// llama.cpp's `grammars/json.gbnf`, in its shape.
const JSON: &str = r#"
root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws

object ::=
  "{" ws (
            string ":" ws value
    ("," ws string ":" ws value)*
  )? "}" ws

array  ::=
  "[" ws (
            value
    ("," ws value)*
  )? "]" ws

string ::=
  "\"" (
    [^"\\\x7F\x00-\x1F] |
    "\\" (["\\bfnrt] | "u" [0-9a-fA-F]{4}) # escapes
  )* "\"" ws

number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws

# Optional space: by convention, applied in this grammar after literal chars when allowed
ws ::= | " " | "\n" [ \t]{0,20}
"#;

#[test]
fn valid_grammars_pass() {
    for grammar in [
        JSON,
        "root ::= \"yes\" | \"no\"",
        "root ::= [a-z]+ \"\\n\"",
        "root ::= \"é\" [α-ω] . \"\\u00e9\\U0001F600\\x41\"",
        "root ::= <[1234]> !<[2]> <|im_end|>",
        "root ::= ( \"a\"\n  | \"b\" )* x{2,5} x{3} x{0,}\nx ::= \"x\"",
        "# a comment\r\nroot ::= \"a\" # trailing\r\n",
        "root ::= expr\nexpr ::= term (\"+\" term)*\nterm ::= [0-9]+",
        "root ::= \"\" | \"a\" root",
    ] {
        assert_eq!(check_gbnf(grammar), Ok(()), "{grammar}");
    }
}

fn error(grammar: &str) -> (usize, usize, String) {
    let e = check_gbnf(grammar).expect_err(grammar);
    (e.line, e.column, e.message)
}

#[test]
fn errors_say_what_and_where() {
    let cases: &[(&str, usize, usize, &str)] = &[
        ("root = \"a\"", 1, 6, "expecting `::=`"),
        (
            "root ::= \"abc",
            1,
            14,
            "unexpected end of the grammar inside the literal",
        ),
        ("root ::= \"\\q\"", 1, 11, "unknown escape"),
        ("root ::= [a-", 1, 13, "inside the character class"),
        ("root ::= \"\\x4\"", 1, 11, "expecting 2 hex digits"),
        (
            "root ::= \"a\"\nitem ::= thing",
            2,
            10,
            "the rule `thing` is used but never defined",
        ),
        ("item ::= \"a\"", 1, 13, "no `root` rule"),
        ("root ::= * \"a\"", 1, 10, "must follow an item"),
        ("root ::= (\"a\" \"b\"", 1, 18, "expecting `)`"),
        (
            "root ::= \"a\"{3001}",
            1,
            14,
            "repetitions are limited to 2000",
        ),
        ("root ::= \"a\"{5,2}", 1, 16, "maximum is below the minimum"),
        ("root ::= \"a\" ) ", 1, 14, "unexpected `)`"),
        ("root ::= <[12>", 1, 14, "expecting `]>`"),
        (
            "root ::= root \"a\" | \"b\"",
            1,
            1,
            "`root` is left-recursive",
        ),
        (
            "root ::= e\ne ::= t | e \"+\" t\nt ::= \"1\"",
            2,
            1,
            "`e` is left-recursive",
        ),
        (
            "root ::= a root \"x\" | \"y\"\na ::= \"\" | \"z\"",
            1,
            1,
            "`root` is left-recursive",
        ),
    ];
    for (grammar, line, column, message) in cases {
        let (l, c, m) = error(grammar);
        assert!(m.contains(message), "{grammar:?}: {m}");
        assert_eq!((l, c), (*line, *column), "{grammar:?}: {m}");
    }
}

proptest! {
    #[test]
    fn never_panics(text in "\\PC{0,80}") {
        let _ = check_gbnf(&text);
    }

    #[test]
    fn never_panics_on_grammar_like_text(
        parts in prop::collection::vec(
            prop::sample::select(vec![
                "root", " ::= ", "\"a\"", "\"", "[", "]", "^", "-", "(", ")", "|", "*", "+", "?",
                "{", "}", ",", "2", "\\", "x", "\n", "#", "<", ">", "!", "é", " ", "a-b",
            ]),
            0..40,
        )
    ) {
        let _ = check_gbnf(&parts.concat());
    }
}
