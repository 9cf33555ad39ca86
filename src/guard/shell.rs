//! A small reading of a shell command, for the progress guard (issue 40):
//! what the command runs once the trivia is taken out, so that trivially
//! varied repeats of one command count as one call, and so that "is this a
//! poll?" is asked of what the command does rather than of its first word
//! (`sleep 0; cat lager.py` is a read, not a wait).
//!
//! The grammar is a deliberately small part of POSIX sh: words with single
//! and double quotes and backslash escapes; the operators `;`, `&&`, `||`,
//! `|`, `&` and newlines; redirections; `!`; comments; `[[ … ]]`; and
//! `while`, `until` and `for` loops. From it come simple commands (argv)
//! with their wrappers looked through (leading `VAR=val`, `env`, `timeout`,
//! `nice`, `ionice`, `nohup`, `command`, `exec`, `builtin`, `time`,
//! `stdbuf`, `sh -c`) and the list elements that do nothing dropped
//! (`true`, `:`, `sleep 0`, `cd .`).
//!
//! It is conservative by construction: anything else — heredocs, `$(…)`,
//! backticks, subshells, `if`, `case`, unbalanced quotes — is not read at
//! all ([`Reading::Opaque`]). Such a command is compared by its text with
//! whitespace collapsed, is never a poll, and counts as writing when it
//! may (a heredoc, a redirection into a file). Reading never fails.

/// A shell command as the progress guard reads it.
#[derive(Debug, Clone, PartialEq)]
pub enum Reading {
    /// Parsed, wrappers looked through, no-op elements dropped.
    Parsed(Script),
    /// A construct this reader does not parse: its text, whitespace
    /// collapsed.
    Opaque(String),
}

/// Read `command`.
pub fn read(command: &str) -> Reading {
    match parse(command, 0) {
        Ok(script) => Reading::Parsed(script.normalised(Drop::NoOps, 0)),
        Err(Unsupported) => {
            Reading::Opaque(command.split_whitespace().collect::<Vec<_>>().join(" "))
        }
    }
}

impl Reading {
    /// What repeats are compared by: the same for trivially varied commands
    /// (quoting, whitespace, wrappers, no-op elements), unambiguous (a
    /// word's spaces and operators are escaped), and tagged so that a parsed
    /// command and an opaque text never meet.
    pub fn canonical(&self) -> String {
        match self {
            Reading::Parsed(script) => {
                let mut out = String::from("parsed\0");
                script.render(&mut out);
                out
            }
            Reading::Opaque(text) => format!("text\0{text}"),
        }
    }

    /// Is it a wait and a re-read of state? Every element either waits (its
    /// leading command, wrappers looked through, is one of `patterns`, word
    /// for word; or it is a `while`, `until` or `for` loop that waits) or only looks
    /// (`cat`, `ls`, `curl`, `git status`, …), and at least one waits. An
    /// opaque command is never a poll: what it does is not known.
    pub fn is_poll(&self, patterns: &[String]) -> bool {
        match self {
            Reading::Parsed(script) => {
                !script.items.is_empty() && script.role(patterns) == Role::Wait
            }
            Reading::Opaque(_) => false,
        }
    }

    /// May it change files? A known writer (`cp`, `sed -i`, `git
    /// checkout`, …) or a redirection into a file anywhere in it; for an
    /// opaque command, a heredoc or what looks like such a redirection.
    pub fn writes(&self) -> bool {
        match self {
            Reading::Parsed(script) => script.writes(),
            Reading::Opaque(text) => text.contains("<<") || redirects_into_a_file(text),
        }
    }
}

/// A construct the reader does not parse.
#[derive(Debug)]
struct Unsupported;

type Parse<T> = Result<T, Unsupported>;

/// How deep loops may nest before a command is opaque, and `sh -c` scripts
/// before one is left unread: bounded work for any input.
const MAX_DEPTH: usize = 8;

/// Characters that expand or glob when unquoted: escaped in the canonical
/// form only where they were quoted, so `'*.py'` and `*.py` stay apart.
const ACTIVE: &[char] = &['$', '*', '?', '[', ']', '{', '}', '~'];
/// Characters a word holds only quoted or escaped: always escaped in the
/// canonical form, so a word's `;` is never the operator.
const SPECIAL: &[char] = &[
    '\'', '"', '\\', '`', ';', '&', '|', '<', '>', '(', ')', '#', '!',
];
/// Where system commands live: `/usr/bin/env` is `env`.
const SYSTEM_DIRS: &[&str] = &[
    "/usr/local/bin/",
    "/usr/bin/",
    "/bin/",
    "/usr/sbin/",
    "/sbin/",
];

/// One word after quote removal.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Word {
    /// The text the command receives (expansions left as written).
    value: String,
    /// The value with every quoted special character escaped.
    canon: String,
    /// Nothing in it expands or globs.
    plain: bool,
    /// Some of it was quoted or escaped (then it is no keyword).
    quoted: bool,
}

impl Word {
    fn new() -> Word {
        Word {
            value: String::new(),
            canon: String::new(),
            plain: true,
            quoted: false,
        }
    }

    /// A word of plain text, as if written quoted where it needs to be.
    fn of(text: &str) -> Word {
        let mut w = Word::new();
        text.chars().for_each(|c| w.literal(c));
        w.finish();
        w
    }

    fn literal(&mut self, c: char) {
        self.value.push(c);
        if c.is_whitespace() || ACTIVE.contains(&c) || SPECIAL.contains(&c) {
            self.canon.push('\\');
        }
        self.canon.push(c);
    }

    fn active(&mut self, c: char) {
        self.value.push(c);
        self.canon.push(c);
        self.plain = false;
    }

    /// An empty word (`''`) is still a word.
    fn finish(&mut self) {
        if self.canon.is_empty() {
            self.canon.push_str("''");
        }
    }

    /// An unquoted reserved word such as `while`.
    fn is_keyword(&self, keyword: &str) -> bool {
        !self.quoted && self.value == keyword
    }

    /// The command it names, when it names one plainly (`[` and `[[`
    /// glob nothing).
    fn name(&self) -> Option<&str> {
        if !self.plain && !matches!(self.value.as_str(), "[" | "[[") {
            return None;
        }
        let bare = SYSTEM_DIRS
            .iter()
            .find_map(|d| self.value.strip_prefix(d))
            .filter(|n| !n.is_empty() && !n.contains('/'));
        Some(bare.unwrap_or(&self.value))
    }

    /// Its plain value (nothing expands in it).
    fn text(&self) -> Option<&str> {
        self.plain.then_some(self.value.as_str())
    }

    /// `NAME=value`, as a command's leading assignment.
    fn is_assignment(&self) -> bool {
        self.canon
            .split_once('=')
            .is_some_and(|(name, _)| is_identifier(name))
    }
}

fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Word(Word),
    Op(Op),
    /// A redirection operator, with its file descriptor (`2>`, `>>`, `&>`).
    Redirect(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Semi,
    Newline,
    And,
    Or,
    Pipe,
    Amp,
}

/// Text to tokens.
struct Lexer {
    chars: Vec<char>,
    pos: usize,
    toks: Vec<Tok>,
    word: Option<Word>,
}

impl Lexer {
    fn new(text: &str) -> Lexer {
        Lexer {
            chars: text.chars().collect(),
            pos: 0,
            toks: Vec::new(),
            word: None,
        }
    }

    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.pos += 1;
        Some(c)
    }

    fn eat(&mut self, c: char) -> bool {
        let here = self.peek() == Some(c);
        if here {
            self.pos += 1;
        }
        here
    }

    fn word(&mut self) -> &mut Word {
        self.word.get_or_insert_with(Word::new)
    }

    fn end_word(&mut self) {
        if let Some(mut w) = self.word.take() {
            w.finish();
            self.toks.push(Tok::Word(w));
        }
    }

    fn op(&mut self, op: Op) {
        self.end_word();
        self.toks.push(Tok::Op(op));
    }

    fn run(mut self) -> Parse<Vec<Tok>> {
        while let Some(c) = self.bump() {
            match c {
                ' ' | '\t' | '\r' => self.end_word(),
                '\n' => self.op(Op::Newline),
                '#' if self.word.is_none() => self.comment(),
                '\\' => self.escaped()?,
                '\'' => self.single_quoted()?,
                '"' => self.double_quoted()?,
                // `$(…)`, `$'…'` and `$"…"` are not read.
                '$' if matches!(self.peek(), Some('(' | '\'' | '"')) => return Err(Unsupported),
                '`' | '(' | ')' => return Err(Unsupported),
                ';' if self.peek() == Some(';') => return Err(Unsupported),
                ';' => self.op(Op::Semi),
                '&' if self.eat('&') => self.op(Op::And),
                '&' if self.peek() == Some('>') => {
                    self.end_word();
                    self.redirect("&".into())?;
                }
                '&' => self.op(Op::Amp),
                '|' if self.eat('|') => self.op(Op::Or),
                '|' if self.peek() == Some('&') => return Err(Unsupported),
                '|' => self.op(Op::Pipe),
                '<' | '>' => {
                    self.pos -= 1;
                    let fd = self.fd_prefix();
                    self.redirect(fd)?;
                }
                c if ACTIVE.contains(&c) => self.word().active(c),
                c => self.word().literal(c),
            }
        }
        self.end_word();
        Ok(self.toks)
    }

    fn comment(&mut self) {
        while self.peek().is_some_and(|c| c != '\n') {
            self.pos += 1;
        }
    }

    fn escaped(&mut self) -> Parse<()> {
        match self.bump() {
            None => Err(Unsupported),
            // A line continuation.
            Some('\n') => Ok(()),
            Some(c) => {
                let w = self.word();
                w.quoted = true;
                w.literal(c);
                Ok(())
            }
        }
    }

    fn single_quoted(&mut self) -> Parse<()> {
        self.word().quoted = true;
        loop {
            match self.bump() {
                None => return Err(Unsupported),
                Some('\'') => return Ok(()),
                Some(c) => self.word().literal(c),
            }
        }
    }

    fn double_quoted(&mut self) -> Parse<()> {
        self.word().quoted = true;
        loop {
            match self.bump() {
                None | Some('`') => return Err(Unsupported),
                Some('"') => return Ok(()),
                Some('\\') => match self.bump() {
                    None => return Err(Unsupported),
                    Some('\n') => {}
                    Some(c @ ('$' | '`' | '"' | '\\')) => self.word().literal(c),
                    Some(c) => {
                        self.word().literal('\\');
                        self.word().literal(c);
                    }
                },
                Some('$') if self.peek() == Some('(') => return Err(Unsupported),
                Some('$') => self.word().active('$'),
                Some(c) => self.word().literal(c),
            }
        }
    }

    /// The digits just before `<` or `>` name a file descriptor (`2>`).
    fn fd_prefix(&mut self) -> String {
        let fd = self.word.as_ref().is_some_and(|w| {
            !w.quoted && !w.value.is_empty() && w.value.chars().all(|c| c.is_ascii_digit())
        });
        if fd {
            return self.word.take().map(|w| w.value).unwrap_or_default();
        }
        self.end_word();
        String::new()
    }

    /// At `<` or `>`: the operator; heredocs and process substitution are
    /// not read.
    fn redirect(&mut self, mut op: String) -> Parse<()> {
        let Some(c) = self.bump() else {
            return Err(Unsupported);
        };
        op.push(c);
        match (c, self.peek()) {
            ('<', Some('<' | '(')) | ('>', Some('(')) => return Err(Unsupported),
            ('<', Some(next @ ('&' | '>'))) | ('>', Some(next @ ('>' | '&' | '|'))) => {
                self.pos += 1;
                op.push(next);
            }
            _ => {}
        }
        // The default descriptors: `1>` is `>`, `0<` is `<`.
        let op = match op.as_bytes() {
            [b'1', b'>', ..] | [b'0', b'<', ..] => op[1..].to_owned(),
            _ => op,
        };
        self.toks.push(Tok::Redirect(op));
        Ok(())
    }
}

/// A list: pipelines joined by `;`, `&&`, `||` and `&`.
#[derive(Debug, Clone, PartialEq)]
pub struct Script {
    items: Vec<Item>,
}

#[derive(Debug, Clone, PartialEq)]
struct Item {
    pipeline: Pipeline,
    /// What joins it to the next item (or ends it).
    then: Sep,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sep {
    Seq,
    And,
    Or,
    Background,
}

impl Sep {
    /// The separator left when a no-op between `self` and `next` is
    /// dropped: what then runs the next element (near enough for a
    /// comparison; `a && true; b` runs `b` whatever `a` did).
    fn absorb(self, next: Sep) -> Sep {
        match (self, next) {
            (Sep::Background, _) => Sep::Background,
            (a, b) if a == b => a,
            _ => Sep::Seq,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
struct Pipeline {
    negated: bool,
    commands: Vec<Command>,
}

#[derive(Debug, Clone, PartialEq)]
enum Command {
    Simple(Simple),
    Loop(Box<Loop>),
    /// `sh -c SCRIPT` and the like, read as its script.
    Nested(Script),
}

#[derive(Debug, Clone, PartialEq)]
struct Simple {
    argv: Vec<Word>,
    redirects: Vec<Redirect>,
}

#[derive(Debug, Clone, PartialEq)]
struct Redirect {
    op: String,
    target: Word,
}

#[derive(Debug, Clone, PartialEq)]
struct Loop {
    head: LoopHead,
    body: Script,
}

#[derive(Debug, Clone, PartialEq)]
enum LoopHead {
    While(Script),
    Until(Script),
    For {
        name: Word,
        words: Option<Vec<Word>>,
    },
}

/// Reserved words this reader does not parse.
const RESERVED: &[&str] = &[
    "if", "then", "elif", "else", "fi", "case", "esac", "select", "function", "coproc", "do",
    "done", "in", "{", "}", "!", "]]",
];

fn parse(text: &str, depth: usize) -> Parse<Script> {
    if depth > MAX_DEPTH {
        return Err(Unsupported);
    }
    let toks = Lexer::new(text).run()?;
    let mut parser = Parser {
        toks: toks.into_iter().peekable(),
        depth,
    };
    let script = parser.script(&[])?;
    match parser.toks.next() {
        None => Ok(script),
        Some(_) => Err(Unsupported),
    }
}

/// Tokens to a [`Script`], by recursive descent.
struct Parser {
    toks: std::iter::Peekable<std::vec::IntoIter<Tok>>,
    depth: usize,
}

impl Parser {
    fn at_keyword(&mut self, keywords: &[&str]) -> bool {
        matches!(self.toks.peek(), Some(Tok::Word(w)) if keywords.iter().any(|k| w.is_keyword(k)))
    }

    fn expect(&mut self, keyword: &str) -> Parse<()> {
        match self.toks.next() {
            Some(Tok::Word(w)) if w.is_keyword(keyword) => Ok(()),
            _ => Err(Unsupported),
        }
    }

    fn skip_newlines(&mut self) {
        while self.toks.next_if_eq(&Tok::Op(Op::Newline)).is_some() {}
    }

    /// Items up to the end or to one of the `stop` keywords (not consumed).
    fn script(&mut self, stop: &[&str]) -> Parse<Script> {
        let mut items = Vec::new();
        loop {
            self.skip_newlines();
            if self.toks.peek().is_none() || self.at_keyword(stop) {
                break;
            }
            let pipeline = self.pipeline()?;
            // A pipeline ends at an operator or at the end: a word after
            // `done` or `]]` is not read.
            let then = match self.toks.next() {
                None => Sep::Seq,
                Some(Tok::Op(Op::Semi | Op::Newline)) => Sep::Seq,
                Some(Tok::Op(Op::And)) => Sep::And,
                Some(Tok::Op(Op::Or)) => Sep::Or,
                Some(Tok::Op(Op::Amp)) => Sep::Background,
                Some(_) => return Err(Unsupported),
            };
            if matches!(then, Sep::And | Sep::Or) {
                self.skip_newlines();
                if self.toks.peek().is_none() || self.at_keyword(stop) {
                    return Err(Unsupported);
                }
            }
            items.push(Item { pipeline, then });
        }
        Ok(Script { items })
    }

    fn pipeline(&mut self) -> Parse<Pipeline> {
        let negated = self.at_keyword(&["!"]);
        if negated {
            self.toks.next();
        }
        let mut commands = vec![self.command()?];
        while self.toks.next_if_eq(&Tok::Op(Op::Pipe)).is_some() {
            self.skip_newlines();
            commands.push(self.command()?);
        }
        Ok(Pipeline { negated, commands })
    }

    fn command(&mut self) -> Parse<Command> {
        if self.at_keyword(&["while", "until"]) {
            return self.condition_loop();
        }
        if self.at_keyword(&["for"]) {
            return self.for_loop();
        }
        if self.at_keyword(RESERVED) {
            return Err(Unsupported);
        }
        if self.at_keyword(&["[["]) {
            return self.test_expression().map(Command::Simple);
        }
        self.simple().map(Command::Simple)
    }

    fn simple(&mut self) -> Parse<Simple> {
        let mut argv = Vec::new();
        let mut redirects = Vec::new();
        while let Some(tok) = self.toks.next_if(|t| !matches!(t, Tok::Op(_))) {
            match tok {
                Tok::Word(w) => argv.push(w),
                Tok::Redirect(op) => match self.toks.next() {
                    Some(Tok::Word(target)) => redirects.push(Redirect { op, target }),
                    _ => return Err(Unsupported),
                },
                Tok::Op(_) => return Err(Unsupported),
            }
        }
        if argv.is_empty() && redirects.is_empty() {
            return Err(Unsupported);
        }
        Ok(Simple { argv, redirects })
    }

    /// `[[ … ]]`: its `&&`, `||`, `<` and `>` are the test's, not the
    /// shell's; read as the words of one command.
    fn test_expression(&mut self) -> Parse<Simple> {
        let mut argv = Vec::new();
        loop {
            let word = match self.toks.next() {
                None => return Err(Unsupported),
                Some(Tok::Word(w)) => w,
                Some(Tok::Op(Op::And)) => Word::of("&&"),
                Some(Tok::Op(Op::Or)) => Word::of("||"),
                Some(Tok::Redirect(op)) => Word::of(&op),
                Some(Tok::Op(_)) => return Err(Unsupported),
            };
            let end = word.is_keyword("]]");
            argv.push(word);
            if end {
                break;
            }
        }
        Ok(Simple {
            argv,
            redirects: Vec::new(),
        })
    }

    fn enter(&mut self) -> Parse<()> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(Unsupported);
        }
        Ok(())
    }

    fn do_done(&mut self) -> Parse<Script> {
        self.skip_newlines();
        self.expect("do")?;
        let body = self.script(&["done"])?;
        self.expect("done")?;
        if body.items.is_empty() {
            return Err(Unsupported);
        }
        Ok(body)
    }

    fn condition_loop(&mut self) -> Parse<Command> {
        self.enter()?;
        let until = self.at_keyword(&["until"]);
        self.toks.next();
        let condition = self.script(&["do"])?;
        if condition.items.is_empty() {
            return Err(Unsupported);
        }
        let body = self.do_done()?;
        self.depth -= 1;
        let head = if until {
            LoopHead::Until(condition)
        } else {
            LoopHead::While(condition)
        };
        Ok(Command::Loop(Box::new(Loop { head, body })))
    }

    fn for_loop(&mut self) -> Parse<Command> {
        self.enter()?;
        self.toks.next();
        let name = match self.toks.next() {
            Some(Tok::Word(w)) if !w.quoted && is_identifier(&w.value) => w,
            _ => return Err(Unsupported),
        };
        self.skip_newlines();
        let mut words = None;
        if self.at_keyword(&["in"]) {
            self.toks.next();
            let mut list = Vec::new();
            while let Some(Tok::Word(w)) = self.toks.next_if(|t| matches!(t, Tok::Word(_))) {
                list.push(w);
            }
            words = Some(list);
        }
        match self.toks.next() {
            Some(Tok::Op(Op::Semi | Op::Newline)) => {}
            _ => return Err(Unsupported),
        }
        let body = self.do_done()?;
        self.depth -= 1;
        Ok(Command::Loop(Box::new(Loop {
            head: LoopHead::For { name, words },
            body,
        })))
    }
}

/// Whether a list drops its no-op elements: a loop's condition keeps them
/// (`while true` is not `while`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Drop {
    NoOps,
    Nothing,
}

impl Script {
    fn normalised(self, drop: Drop, depth: usize) -> Script {
        let mut items: Vec<Item> = Vec::with_capacity(self.items.len());
        for item in self.items {
            let pipeline = item.pipeline.normalised(depth);
            if drop == Drop::NoOps && pipeline.is_noop() {
                if let Some(last) = items.last_mut() {
                    last.then = last.then.absorb(item.then);
                }
                continue;
            }
            items.push(Item {
                pipeline,
                then: item.then,
            });
        }
        Script { items }
    }

    /// A script of one plain command, as that command (`sh -c 'cat x'` is
    /// `cat x`).
    fn into_single(mut self) -> Result<Command, Script> {
        let single = self.items.len() == 1
            && self.items[0].then == Sep::Seq
            && !self.items[0].pipeline.negated
            && self.items[0].pipeline.commands.len() == 1;
        match self.items.pop() {
            Some(mut item) if single => Ok(item
                .pipeline
                .commands
                .pop()
                .expect("a pipeline of one command")),
            Some(item) => {
                self.items.push(item);
                Err(self)
            }
            None => Err(self),
        }
    }

    fn render(&self, out: &mut String) {
        for (i, item) in self.items.iter().enumerate() {
            if i > 0 {
                out.push(' ');
            }
            item.pipeline.render(out);
            let last = i + 1 == self.items.len();
            out.push_str(match item.then {
                Sep::Seq if last => "",
                Sep::Seq => " ;",
                Sep::And => " &&",
                Sep::Or => " ||",
                Sep::Background => " &",
            });
        }
    }

    fn role(&self, patterns: &[String]) -> Role {
        self.items
            .iter()
            .map(|i| i.pipeline.role(patterns))
            .max()
            .unwrap_or(Role::Look)
    }

    fn writes(&self) -> bool {
        self.items.iter().any(|i| i.pipeline.writes())
    }
}

impl Pipeline {
    fn normalised(self, depth: usize) -> Pipeline {
        Pipeline {
            negated: self.negated,
            commands: self
                .commands
                .into_iter()
                .map(|c| c.normalised(depth))
                .collect(),
        }
    }

    fn is_noop(&self) -> bool {
        !self.negated && self.commands.len() == 1 && self.commands[0].is_noop()
    }

    fn render(&self, out: &mut String) {
        if self.negated {
            out.push_str("! ");
        }
        for (i, c) in self.commands.iter().enumerate() {
            if i > 0 {
                out.push_str(" | ");
            }
            c.render(out);
        }
    }

    fn role(&self, patterns: &[String]) -> Role {
        self.commands
            .iter()
            .map(|c| c.role(patterns))
            .max()
            .unwrap_or(Role::Look)
    }

    fn writes(&self) -> bool {
        self.commands.iter().any(Command::writes)
    }
}

impl Command {
    fn normalised(self, depth: usize) -> Command {
        match self {
            Command::Simple(s) => s.normalised(depth),
            Command::Loop(l) => Command::Loop(Box::new(Loop {
                head: match l.head {
                    LoopHead::While(c) => LoopHead::While(c.normalised(Drop::Nothing, depth)),
                    LoopHead::Until(c) => LoopHead::Until(c.normalised(Drop::Nothing, depth)),
                    head @ LoopHead::For { .. } => head,
                },
                body: l.body.normalised(Drop::NoOps, depth),
            })),
            Command::Nested(s) => Command::Nested(s.normalised(Drop::NoOps, depth)),
        }
    }

    fn is_noop(&self) -> bool {
        match self {
            Command::Simple(s) => s.is_noop(),
            Command::Loop(_) => false,
            Command::Nested(s) => s.items.is_empty(),
        }
    }

    fn render(&self, out: &mut String) {
        match self {
            Command::Simple(s) => s.render(out),
            Command::Loop(l) => l.render(out),
            Command::Nested(s) => {
                out.push_str("{ ");
                s.render(out);
                out.push_str(" ; }");
            }
        }
    }

    fn role(&self, patterns: &[String]) -> Role {
        match self {
            Command::Simple(s) => s.role(patterns),
            Command::Loop(l) => l.role(patterns),
            Command::Nested(s) => s.role(patterns),
        }
    }

    fn writes(&self) -> bool {
        match self {
            Command::Simple(s) => s.writes(),
            Command::Loop(l) => l.writes(),
            Command::Nested(s) => s.writes(),
        }
    }
}

impl Loop {
    fn render(&self, out: &mut String) {
        match &self.head {
            LoopHead::While(c) | LoopHead::Until(c) => {
                let kw = if matches!(self.head, LoopHead::While(_)) {
                    "while "
                } else {
                    "until "
                };
                out.push_str(kw);
                c.render(out);
            }
            LoopHead::For { name, words } => {
                out.push_str("for ");
                out.push_str(&name.canon);
                if let Some(words) = words {
                    out.push_str(" in");
                    for w in words {
                        out.push(' ');
                        out.push_str(&w.canon);
                    }
                }
            }
        }
        out.push_str(" ; do ");
        self.body.render(out);
        out.push_str(" ; done");
    }

    /// A loop waits when it sleeps between looks (`until curl …; do sleep
    /// 1; done`); one that does work is work.
    fn role(&self, patterns: &[String]) -> Role {
        let head = match &self.head {
            LoopHead::While(c) | LoopHead::Until(c) => c.role(patterns),
            LoopHead::For { .. } => Role::Look,
        };
        head.max(self.body.role(patterns))
    }

    fn writes(&self) -> bool {
        let head = match &self.head {
            LoopHead::While(c) | LoopHead::Until(c) => c.writes(),
            LoopHead::For { .. } => false,
        };
        head || self.body.writes()
    }
}

/// What an element of a command does, for the polling rule; ordered so
/// that the most a pipeline or list does is its `max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Role {
    /// Only looks at state (or does nothing at all).
    Look,
    /// Waits: a polling pattern, or a loop that waits.
    Wait,
    /// Anything else.
    Work,
}

/// Commands that only look at state: what a poll re-reads between its
/// waits. Shell bookkeeping (`cd`, `export`, `true`, `break`) counts here
/// too: it neither waits nor works.
const LOOKS: &[&str] = &[
    "cat", "head", "tail", "ls", "stat", "test", "[", "[[", "wc", "grep", "egrep", "fgrep", "rg",
    "awk", "sed", "cut", "sort", "uniq", "jq", "tr", "echo", "printf", "date", "du", "df", "free",
    "uptime", "ps", "pgrep", "pidof", "jobs", "ss", "netstat", "lsof", "curl", "nc", "file",
    "readlink", "realpath", "pwd", "which", "true", "false", ":", "break", "continue", "cd",
    "export", "set", "unset", "pushd", "popd",
];
/// Commands whose subcommand says whether they only look.
const LOOK_SUBCOMMANDS: &[(&str, &[&str])] = &[
    (
        "git",
        &["status", "log", "diff", "show", "rev-parse", "ls-files"],
    ),
    ("docker", &["ps", "logs", "inspect", "stats"]),
    ("kubectl", &["get", "describe", "logs"]),
    ("systemctl", &["status", "is-active", "is-failed", "show"]),
];
/// Commands whose purpose is to change files.
const WRITERS: &[&str] = &[
    "cp",
    "mv",
    "rm",
    "touch",
    "mkdir",
    "rmdir",
    "ln",
    "chmod",
    "chown",
    "tee",
    "patch",
    "truncate",
    "install",
    "rsync",
    "dd",
    "apply_patch",
];
/// Commands whose subcommand says whether they change files.
const WRITE_SUBCOMMANDS: &[(&str, &[&str])] = &[(
    "git",
    &[
        "add",
        "am",
        "apply",
        "checkout",
        "cherry-pick",
        "clean",
        "commit",
        "merge",
        "mv",
        "pull",
        "rebase",
        "reset",
        "restore",
        "revert",
        "rm",
        "stash",
        "switch",
    ],
)];
/// Commands that edit their files in place when asked (`-i`).
const IN_PLACE: &[&str] = &["sed", "perl"];
/// Shells whose `-c SCRIPT` is read as the script.
const SHELLS: &[&str] = &["sh", "bash", "dash", "zsh"];
/// Where output goes without changing a file.
const NOT_FILES: &[&str] = &["/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty"];

impl Simple {
    fn normalised(self, depth: usize) -> Command {
        let start = unwrapped(&self.argv);
        let mut argv = self.argv;
        argv.drain(..start);
        if let Some(first) = argv.first_mut() {
            let bare = first
                .name()
                .filter(|n| *n != first.value)
                .map(str::to_owned);
            if let Some(bare) = bare {
                *first = Word::of(&bare);
            }
        }
        let simple = Simple {
            argv,
            redirects: self.redirects,
        };
        match simple.nested_script(depth) {
            Some(script) => script.into_single().unwrap_or_else(Command::Nested),
            None => Command::Simple(simple),
        }
    }

    /// `sh -c SCRIPT` (`bash -lc …`, …) with nothing else: its script.
    fn nested_script(&self, depth: usize) -> Option<Script> {
        let [shell, flags, script] = self.argv.as_slice() else {
            return None;
        };
        let flags = flags.text()?;
        let is_c = flags
            .strip_prefix('-')
            .is_some_and(|f| f.contains('c') && f.chars().all(|c| "ceilx".contains(c)));
        if !self.redirects.is_empty() || !is_c || !SHELLS.contains(&shell.name()?) {
            return None;
        }
        let inner = parse(script.text()?, depth + 1).ok()?;
        Some(inner.normalised(Drop::NoOps, depth + 1))
    }

    fn name(&self) -> Option<&str> {
        self.argv.first().and_then(Word::name)
    }

    fn arg(&self, i: usize) -> Option<&str> {
        self.argv.get(i).and_then(Word::text)
    }

    /// `true`, `:`, `sleep 0`, `cd .`, with no redirection (`: > f`
    /// truncates `f`).
    fn is_noop(&self) -> bool {
        if !self.redirects.is_empty() {
            return false;
        }
        match (self.name(), self.argv.len()) {
            (Some("true" | ":"), 1) => true,
            (Some("cd"), 2) => matches!(self.arg(1), Some("." | "./")),
            (Some("sleep"), n) if n > 1 => self.argv[1..]
                .iter()
                .all(|w| w.text().and_then(seconds) == Some(0.0)),
            _ => false,
        }
    }

    fn render(&self, out: &mut String) {
        let words = self.argv.iter().map(|w| w.canon.clone());
        let redirects = self
            .redirects
            .iter()
            .map(|r| format!("{} {}", r.op, r.target.canon));
        out.push_str(&words.chain(redirects).collect::<Vec<_>>().join(" "));
    }

    fn role(&self, patterns: &[String]) -> Role {
        if self.writes() {
            return Role::Work;
        }
        if !self.argv.is_empty() && self.argv.iter().all(Word::is_assignment) {
            return Role::Look;
        }
        let Some(name) = self.name() else {
            return Role::Work;
        };
        if patterns.iter().any(|p| self.starts_with(p)) {
            return Role::Wait;
        }
        if LOOKS.contains(&name) || subcommand_in(LOOK_SUBCOMMANDS, name, self.arg(1)) {
            Role::Look
        } else {
            Role::Work
        }
    }

    /// Its argv begins with `pattern`, word for word (`tail -f`).
    fn starts_with(&self, pattern: &str) -> bool {
        let want: Vec<&str> = pattern.split_whitespace().collect();
        !want.is_empty()
            && want.len() <= self.argv.len()
            && want.iter().enumerate().all(|(i, p)| {
                let have = if i == 0 { self.name() } else { self.arg(i) };
                have == Some(*p)
            })
    }

    fn writes(&self) -> bool {
        if self.redirects.iter().any(Redirect::writes) {
            return true;
        }
        let Some(name) = self.name() else {
            return false;
        };
        WRITERS.contains(&name)
            || subcommand_in(WRITE_SUBCOMMANDS, name, self.arg(1))
            || (IN_PLACE.contains(&name) && self.argv[1..].iter().any(is_in_place_flag))
    }
}

impl Redirect {
    /// Into a file: not a descriptor duplication (`2>&1`), not `/dev/null`.
    fn writes(&self) -> bool {
        let dup = self.op.ends_with('&')
            && (self.target.value == "-" || self.target.value.chars().all(|c| c.is_ascii_digit()));
        self.op.contains('>') && !dup && !NOT_FILES.contains(&self.target.value.as_str())
    }
}

fn subcommand_in(table: &[(&str, &[&str])], name: &str, sub: Option<&str>) -> bool {
    table
        .iter()
        .any(|(n, subs)| *n == name && sub.is_some_and(|s| subs.contains(&s)))
}

/// `-i`, `-i.bak`, `-pi`, `--in-place`.
fn is_in_place_flag(w: &Word) -> bool {
    let v = w.value.as_str();
    v.starts_with("--in-place")
        || (v.starts_with('-')
            && !v.starts_with("--")
            && v[1..].split('.').next().is_some_and(|f| f.contains('i')))
}

/// Where the wrapped command starts: past leading `VAR=val` assignments and
/// the wrappers (`env`, `timeout 30`, `nice -n 5`, …), each in the forms
/// that only wrap. A wrapper in any other form (`command -v`, `env -S`)
/// is the command itself.
fn unwrapped(argv: &[Word]) -> usize {
    let mut i = 0;
    loop {
        let after_assignments = i + argv[i..].iter().take_while(|w| w.is_assignment()).count();
        if after_assignments < argv.len() {
            i = after_assignments;
        }
        let Some(name) = argv.get(i).and_then(Word::name) else {
            return i;
        };
        let next = match name {
            "env" => env_args(argv, i + 1),
            "timeout" => timeout_args(argv, i + 1),
            "nice" => options(argv, i + 1, &["-n"], |f| {
                f.strip_prefix('-')
                    .is_some_and(|n| n.chars().all(|c| c.is_ascii_digit()))
                    || f.starts_with("-n")
                    || f.starts_with("--adjustment=")
            }),
            "ionice" => options(argv, i + 1, &["-c", "-n"], |f| {
                f == "-t" || (f.len() > 2 && (f.starts_with("-c") || f.starts_with("-n")))
            }),
            "stdbuf" => options(argv, i + 1, &["-i", "-o", "-e"], |f| {
                ["-i", "-o", "-e", "--input=", "--output=", "--error="]
                    .iter()
                    .any(|p| f.len() > p.len() && f.starts_with(p))
            }),
            "exec" => options(argv, i + 1, &["-a"], |f| f == "-c" || f == "-l"),
            "command" => options(argv, i + 1, &[], |f| f == "-p"),
            "time" => options(argv, i + 1, &[], |f| f == "-p"),
            "nohup" | "builtin" => Some(i + 1),
            _ => None,
        };
        match next {
            Some(n) if n < argv.len() => i = n,
            _ => return i,
        }
    }
}

/// Past a wrapper's options: those in `with_value` take the next word,
/// those `alone` accepts stand alone, `--` ends them; any other option
/// means this is no plain wrapper (`None`).
fn options(
    argv: &[Word],
    mut i: usize,
    with_value: &[&str],
    alone: impl Fn(&str) -> bool,
) -> Option<usize> {
    while let Some(w) = argv.get(i) {
        let f = w.text()?;
        if f == "--" {
            return Some(i + 1);
        }
        if !f.starts_with('-') || f == "-" {
            break;
        }
        if with_value.contains(&f) {
            i += 2;
        } else if alone(f) {
            i += 1;
        } else {
            return None;
        }
    }
    Some(i)
}

/// `env [-i] [-u NAME] [NAME=value …]`.
fn env_args(argv: &[Word], mut i: usize) -> Option<usize> {
    while let Some(w) = argv.get(i) {
        if w.is_assignment() {
            i += 1;
            continue;
        }
        let f = w.text()?;
        match f {
            "-i" | "-" | "--ignore-environment" => i += 1,
            "-u" => i += 2,
            "--" => return Some(i + 1),
            f if f.starts_with("--unset=") || (f.starts_with("-u") && f.len() > 2) => i += 1,
            f if f.starts_with('-') => return None,
            _ => break,
        }
    }
    Some(i)
}

/// `timeout [--preserve-status] [--foreground] [-s SIG] [-k DUR] DURATION`.
fn timeout_args(argv: &[Word], i: usize) -> Option<usize> {
    let i = options(argv, i, &["-s", "-k", "--signal", "--kill-after"], |f| {
        matches!(f, "--preserve-status" | "--foreground" | "-v" | "--verbose")
            || ["-s", "-k", "--signal=", "--kill-after="]
                .iter()
                .any(|p| f.len() > p.len() && f.starts_with(p))
    })?;
    argv.get(i)?.text().and_then(seconds)?;
    Some(i + 1)
}

/// A `sleep` or `timeout` duration in seconds (`5`, `0.5`, `2m`).
fn seconds(text: &str) -> Option<f64> {
    let (number, unit) = match text.char_indices().last()? {
        (i, 's') => (&text[..i], 1.0),
        (i, 'm') => (&text[..i], 60.0),
        (i, 'h') => (&text[..i], 3600.0),
        (i, 'd') => (&text[..i], 86400.0),
        _ => (text, 1.0),
    };
    if number.is_empty() || !number.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return None;
    }
    number.parse::<f64>().ok().map(|n| n * unit)
}

/// An opaque command's text has what looks like a redirection into a file
/// (not `2>&1`, not `>/dev/null`).
fn redirects_into_a_file(text: &str) -> bool {
    text.match_indices('>').any(|(i, _)| {
        let arrow = text[..i].ends_with(['-', '=']);
        let rest = text[i + 1..].trim_start_matches(['>', '|']).trim_start();
        !arrow && !rest.starts_with('&') && !NOT_FILES.iter().any(|f| rest.starts_with(f))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canon(command: &str) -> String {
        read(command).canonical()
    }

    fn polls(command: &str) -> bool {
        let p: Vec<String> = crate::guard::DEFAULT_POLL_PATTERNS
            .iter()
            .map(|s| s.to_string())
            .collect();
        read(command).is_poll(&p)
    }

    #[test]
    fn trivia_is_taken_out() {
        let base = canon("cat lager.py");
        assert_eq!(base, "parsed\0cat lager.py");
        for variant in [
            "sleep 0; cat lager.py",
            "sleep 0.0 && cat lager.py",
            "  cat\t 'lager.py'  ",
            "\"cat\" lager\\.py",
            "'c'at lag\"er\".py",
            "true && : ; cat lager.py",
            "cd . && cat lager.py",
            "env cat lager.py",
            "env -i X=1 Y='a b' cat lager.py",
            "X=1 cat lager.py",
            "timeout 30 cat lager.py",
            "timeout -s KILL --preserve-status 2m cat lager.py",
            "nice -n 5 cat lager.py",
            "nohup command exec builtin time cat lager.py",
            "stdbuf -oL ionice -c 3 cat lager.py",
            "/usr/bin/env /bin/cat lager.py",
            "cat lager.py # again",
            "cat lager.py || true",
            "cat \\\n lager.py\n",
            "bash -c 'cat lager.py'",
            "timeout 5 sh -lc \"sleep 0; cat lager.py\"",
        ] {
            assert_eq!(canon(variant), base, "{variant:?}");
        }
    }

    #[test]
    fn what_changes_meaning_stays() {
        let base = canon("cat lager.py");
        for other in [
            "cat lager.py > out",
            "cat lager.py 2>&1",
            "cat lager.py 2> out",
            "cat 'lager.py' x",
            "! cat lager.py",
            "cat lager.py &",
            "sleep 1; cat lager.py",
            "cat lager.py; false",
            "cat lager.py | head",
            "command -v cat lager.py",
        ] {
            assert_ne!(canon(other), base, "{other:?}");
        }
        // Quoting that changes what expands.
        assert_ne!(canon("ls *.py"), canon("ls '*.py'"));
        assert_ne!(canon("echo $HOME"), canon("echo '$HOME'"));
        assert_eq!(canon("echo $HOME"), canon("echo \"$HOME\""));
        // A word's space or operator is not a separator.
        assert_ne!(canon("echo 'a b'"), canon("echo a b"));
        assert_ne!(canon("echo 'a;' b"), canon("echo a ; b"));
        assert_ne!(canon("a && b"), canon("a ; b"));
        assert_ne!(canon("a || b"), canon("a && b"));
    }

    #[test]
    fn redirections_are_spelled_one_way() {
        let base = canon("pytest > out.txt 2>&1");
        for same in [
            "pytest >out.txt 2>&1",
            "pytest 1> 'out.txt'  2>&1",
            "pytest>\"out.txt\" 2>&1",
        ] {
            assert_eq!(canon(same), base, "{same:?}");
        }
        assert_eq!(canon("wc -l 0< x"), canon("wc -l < x"));
        assert_ne!(canon("pytest 2>&1 > out.txt"), base, "order matters");
    }

    #[test]
    fn no_ops_between_elements_keep_what_runs_next() {
        assert_eq!(canon("a; true && b"), canon("a; b"));
        assert_eq!(canon("a && true; b"), canon("a; b"));
        assert_eq!(canon("a && : && b"), canon("a && b"));
        assert_eq!(canon("a && sleep 0"), canon("a"));
        assert_eq!(canon("sleep 0"), "parsed\0");
    }

    #[test]
    fn what_is_not_parsed_is_its_text() {
        for (text, collapsed) in [
            ("cat  $(ls -t | head -1)", "text\0cat $(ls -t | head -1)"),
            ("cat `ls`", "text\0cat `ls`"),
            ("(cd x && make)", "text\0(cd x && make)"),
            ("cat <<EOF\nx\nEOF", "text\0cat <<EOF x EOF"),
            ("echo 'unbalanced", "text\0echo 'unbalanced"),
            ("if true; then ls; fi", "text\0if true; then ls; fi"),
            ("a &&", "text\0a &&"),
            ("diff <(a) <(b)", "text\0diff <(a) <(b)"),
            ("trailing \\", "text\0trailing \\"),
        ] {
            assert_eq!(canon(text), collapsed, "{text:?}");
            assert!(!polls(text), "{text:?}");
        }
    }

    #[test]
    fn a_poll_waits_and_only_looks() {
        for poll in [
            "sleep 5",
            "sleep 5; cat lager.py",
            "sleep 2m && tail -n 50 build.log",
            "sleep 5; curl -s localhost:8000/health",
            "sleep 1 && git status --short && ls out/",
            "sleep 3; ps aux | grep server",
            "ps aux",
            "tail -f build.log",
            "tail -f build.log | grep --line-buffered ERROR",
            "wait",
            "watch -n 1 cat status",
            "until curl -sf localhost:8000/health; do sleep 1; done",
            "while ! test -f out/done; do sleep 2; done; cat out/done",
            "until [[ -f x && -s x ]]; do sleep 1; done",
            "until [ -f out/done ]; do sleep 1; done",
            "for i in 1 2 3; do curl -s x && break; sleep 1; done",
            "timeout 60 bash -c 'until curl -s x; do sleep 1; done'",
            "cd /repo && sleep 10 && tail -n 20 log",
        ] {
            assert!(polls(poll), "{poll:?}");
        }
        for not in [
            "sleep 0; cat lager.py",
            "cat lager.py",
            "sleep 5; pytest -q",
            "sleep 5 && cat x > y",
            "sleeper --fast",
            "timeout 30 cat lager.py",
            "true",
            "sleep 0",
            "while true; do pytest; sleep 60; done",
            "until pytest -x; do sleep 1; done",
            "python server.py & sleep 2; curl -s x",
        ] {
            assert!(!polls(not), "{not:?}");
        }
    }

    #[test]
    fn patterns_name_leading_commands_word_for_word() {
        let p = vec!["tail -f".to_string(), "make watch".to_string()];
        assert!(read("tail   -f log").is_poll(&p));
        assert!(read("env X=1 make watch").is_poll(&p));
        assert!(!read("tail -n 5 -f log").is_poll(&p));
        assert!(!read("make").is_poll(&p));
        assert!(!read("sleep 5").is_poll(&p), "not configured");
        assert!(!read("tail -f log").is_poll(&[String::new()]));
    }

    #[test]
    fn writes_are_seen() {
        for w in [
            "sed -i 's/a/b/' x.py",
            "perl -pi -e 's/a/b/' x",
            "echo x > f",
            "cat a >> b",
            "cp a b && pytest",
            "git checkout -- x.py",
            "git stash",
            "printf x | tee f",
            "cat > f <<'EOF'\nx\nEOF",
            "python - <<EOF\nopen('f','w')\nEOF",
            "echo $(date) > stamp",
            "until false; do touch x; sleep 1; done",
            "bash -c 'rm -f x'",
        ] {
            assert!(read(w).writes(), "{w:?}");
        }
        for r in [
            "cat x",
            "pytest -q 2>&1",
            "make >/dev/null 2>&1",
            "sed -n 1,20p x.py",
            "git status",
            "cat $(ls) 2>&1",
            "python -c 'print(1 -> 2)'",
        ] {
            assert!(!read(r).writes(), "{r:?}");
        }
    }

    #[test]
    fn deep_nesting_is_opaque_not_a_crash() {
        let mut script = "cat x".to_string();
        for _ in 0..10 {
            script = format!("bash -c {}", crate::util::shell_quote(&script));
        }
        // Too deep to unwrap all the way: still read, never a panic.
        let _ = read(&script).canonical();
        let loops = "while a; do ".repeat(20) + "b" + &"; done".repeat(20);
        assert!(matches!(read(&loops), Reading::Opaque(_)));
    }

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config {
            cases: 512,
            failure_persistence: None,
            ..Default::default()
        })]

        /// Any text reads without a panic, and the same text the same way.
        #[test]
        fn any_text_reads(text in "[a-z ;&|<>'\"\\\\$`(){}\\[\\]#!=*\n\t-]{0,60}") {
            let a = read(&text);
            proptest::prop_assert_eq!(a.canonical(), read(&text).canonical());
            let _ = a.is_poll(&["sleep".to_string()]);
            let _ = a.writes();
        }
    }
}
