//! sluice's expression language: what Debezium's scripting transforms (`Filter`,
//! `ContentBasedRouter`) evaluate, without a script engine (docs/transforms.md, "Expressions").
//!
//! Debezium evaluates Groovy or JavaScript through JSR 223 with the record bound as `key`,
//! `value`, `topic` and `header`; sluice embeds neither language. Nearly every condition
//! written for those transforms is one expression over those bindings (`value.op == 'd'`,
//! `value.after.status != null && value.source.table == 'orders'`), so sluice reads that
//! common subset of Groovy's syntax, with Groovy's meaning, and refuses the rest when the
//! pipeline is loaded (a statement, a closure, a method it does not know), naming what it
//! met. Written by hand: the language is this small subset, tied to the record's JSON; no
//! crate evaluates Groovy's rules (null ordering, `==` across number types, `in`, `==~`).
//!
//! - Literals: `'text'` and `"text"` (no `${…}`), integers, decimals, `true`, `false`,
//!   `null`, lists `['c', 'u']`.
//! - The record: `value` and `key` (their fields by `.name`, `?.name`, `['name']` or
//!   `.get('name')`), `topic`, `header.<name>.value`.
//! - Operators, by Groovy's precedence: `?:` and `c ? a : b`; `||`; `&&`; `==` `!=` (and
//!   JavaScript's `===` `!==`), `==~` (the whole text matches a regular expression), `=~` (a
//!   part matches); `<` `<=` `>` `>=` `in`; `+` `-`; `*` `%`; `!` and unary `-`.
//! - Methods of texts: `startsWith`, `endsWith`, `contains`, `matches`, `replace`,
//!   `toLowerCase`, `toUpperCase`, `trim`, `length`, `isEmpty`, `equals`, `equalsIgnoreCase`,
//!   `toString`; `size()` of a text, list or object.
//!
//! A field a struct does not have, a property of null, a method on the wrong type, an order
//! between a text and a number: errors, as Groovy's are (the record then takes the pipeline's
//! error policy). Values are compared as the event's JSON holds them: a decimal Debezium
//! writes as bytes (`decimal.handling.mode = precise`) is its base64 text, not a number.

use std::borrow::Cow;
use std::cmp::Ordering;

use regex_automata::meta::Regex;

use super::json::{Members, as_str, elements};
use super::record::Record;

/// A parsed expression.
#[derive(Debug)]
pub struct Expr(Node);

#[derive(Debug)]
enum Node {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    List(Vec<Node>),
    Root(Root),
    /// `of.name`; `safe`: `of?.name`.
    Field {
        of: Box<Node>,
        name: String,
        safe: bool,
    },
    /// `of[index]`.
    Index(Box<Node>, Box<Node>),
    Call {
        of: Box<Node>,
        method: Method,
        args: Vec<Node>,
        safe: bool,
    },
    Not(Box<Node>),
    Neg(Box<Node>),
    Binary(Op, Box<Node>, Box<Node>),
    /// `a ==~ /re/` and `a =~ /re/` with the pattern compiled; `whole`: `==~`.
    Regex {
        of: Box<Node>,
        regex: Box<Regex>,
        whole: bool,
    },
    And(Box<Node>, Box<Node>),
    Or(Box<Node>, Box<Node>),
    If(Box<Node>, Box<Node>, Box<Node>),
    Elvis(Box<Node>, Box<Node>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Root {
    Key,
    Value,
    Topic,
    Header,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    In,
    Add,
    Sub,
    Mul,
    Rem,
}

#[derive(Debug)]
enum Method {
    Get,
    StartsWith,
    EndsWith,
    Contains,
    /// `matches` with its (literal) pattern compiled to match whole texts.
    Matches(Box<Regex>),
    Replace,
    ToLowerCase,
    ToUpperCase,
    Trim,
    Length,
    Size,
    IsEmpty,
    Equals,
    EqualsIgnoreCase,
    ToString,
}

impl Method {
    fn by_name(name: &str) -> Option<(Method, usize)> {
        Some(match name {
            "get" => (Method::Get, 1),
            "startsWith" => (Method::StartsWith, 1),
            "endsWith" => (Method::EndsWith, 1),
            "contains" => (Method::Contains, 1),
            "replace" => (Method::Replace, 2),
            "toLowerCase" => (Method::ToLowerCase, 0),
            "toUpperCase" => (Method::ToUpperCase, 0),
            "trim" => (Method::Trim, 0),
            "length" => (Method::Length, 0),
            "size" => (Method::Size, 0),
            "isEmpty" => (Method::IsEmpty, 0),
            "equals" => (Method::Equals, 1),
            "equalsIgnoreCase" => (Method::EqualsIgnoreCase, 1),
            "toString" => (Method::ToString, 0),
            _ => return None,
        })
    }
}

/// A value while an expression is evaluated, borrowing from the record and the expression.
#[derive(Debug, Clone)]
pub enum Val<'a> {
    /// `null`.
    Null,
    /// A boolean.
    Bool(bool),
    /// An integer.
    Int(i64),
    /// A number with a fraction or an exponent.
    Float(f64),
    /// A text.
    Str(Cow<'a, str>),
    /// A JSON object or array of the record, as its text.
    Json(&'a str),
    /// A list literal.
    List(Vec<Val<'a>>),
    /// The record's headers (`header`).
    Headers(&'a Record),
    /// One header (`header.name`): its `value`.
    Header(&'a str),
}

impl Val<'_> {
    fn kind(&self) -> &'static str {
        match self {
            Val::Null => "null",
            Val::Bool(_) => "a boolean",
            Val::Int(_) | Val::Float(_) => "a number",
            Val::Str(_) => "a text",
            Val::Json(text) if text.starts_with('[') => "a list",
            Val::Json(_) => "a struct",
            Val::List(_) => "a list",
            Val::Headers(_) => "the headers",
            Val::Header(_) => "a header",
        }
    }

    /// Groovy's truth: null, false, 0, an empty text or list are false.
    pub fn truth(&self) -> bool {
        match self {
            Val::Null => false,
            Val::Bool(b) => *b,
            Val::Int(n) => *n != 0,
            Val::Float(f) => *f != 0.0,
            Val::Str(s) => !s.is_empty(),
            Val::Json(text) => text.trim() != "[]",
            Val::List(items) => !items.is_empty(),
            Val::Headers(_) | Val::Header(_) => true,
        }
    }

    /// The text Groovy's `toString()` (and `+` on a text) makes of the value.
    fn text(&self) -> Cow<'_, str> {
        match self {
            Val::Null => "null".into(),
            Val::Bool(b) => b.to_string().into(),
            Val::Int(n) => n.to_string().into(),
            Val::Float(f) => f.to_string().into(),
            Val::Str(s) => Cow::Borrowed(s.as_ref()),
            Val::Json(text) => Cow::Borrowed(text),
            Val::List(items) => format!(
                "[{}]",
                items
                    .iter()
                    .map(|v| v.text())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
            .into(),
            Val::Headers(_) => "{headers}".into(),
            Val::Header(value) => Cow::Borrowed(value),
        }
    }
}

/// A JSON value's text as a [`Val`].
fn from_json(text: &str) -> Val<'_> {
    let text = text.trim();
    match text.as_bytes().first() {
        Some(b'{' | b'[') => Val::Json(text),
        Some(b'"') => as_str(text).map_or(Val::Null, Val::Str),
        Some(b't') => Val::Bool(true),
        Some(b'f') => Val::Bool(false),
        Some(b'n') | None => Val::Null,
        _ => text
            .parse::<i64>()
            .map(Val::Int)
            .or_else(|_| text.parse::<f64>().map(Val::Float))
            .unwrap_or(Val::Null),
    }
}

impl Expr {
    /// Parses `text`.
    ///
    /// # Errors
    ///
    /// Not an expression of the language, with where and why.
    pub fn parse(text: &str) -> Result<Self, String> {
        let tokens = lex(text)?;
        let mut parser = Parser { tokens, at: 0 };
        let node = parser.ternary()?;
        match parser.peek() {
            Tok::End => Ok(Expr(node)),
            other => Err(format!(
                "unexpected {} after a complete expression: sluice's expressions are one expression (no statements, `;` or closures)",
                other.show()
            )),
        }
    }

    /// The expression's value for `record`.
    ///
    /// # Errors
    ///
    /// As Groovy's: a missing field, a property of null, a method on the wrong type…
    pub fn eval<'a>(&'a self, record: &'a Record) -> Result<Val<'a>, String> {
        eval(&self.0, record)
    }

    /// The literal texts the expression can result in (a router's topics known beforehand;
    /// results it computes are not among them).
    pub fn literal_results(&self) -> Vec<&str> {
        fn walk<'a>(node: &'a Node, out: &mut Vec<&'a str>) {
            match node {
                Node::Str(s) => out.push(s),
                Node::If(_, a, b) | Node::Elvis(a, b) => {
                    walk(a, out);
                    walk(b, out);
                }
                _ => {}
            }
        }
        let mut out = Vec::new();
        walk(&self.0, &mut out);
        out
    }
}

// ---- Lexing ----

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Int(i64),
    Float(f64),
    Str(String),
    Ident(String),
    Sym(&'static str),
    End,
}

impl Tok {
    fn show(&self) -> String {
        match self {
            Tok::Int(n) => format!("the number {n}"),
            Tok::Float(f) => format!("the number {f}"),
            Tok::Str(s) => format!("the text {s:?}"),
            Tok::Ident(name) => format!("`{name}`"),
            Tok::Sym(s) => format!("`{s}`"),
            Tok::End => "the end".into(),
        }
    }
}

/// Longest first.
const SYMBOLS: &[&str] = &[
    "===", "!==", "==~", "?.", "?:", "==", "!=", "<=", ">=", "&&", "||", "=~", "(", ")", "[", "]",
    ",", ".", "!", "<", ">", "+", "-", "*", "%", "?", ":", "/", ";", "{", "}", "=", "$",
];

fn lex(text: &str) -> Result<Vec<Tok>, String> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c == '\'' || c == '"' {
            let mut s = String::new();
            i += 1;
            loop {
                match chars.get(i) {
                    None => return Err(format!("a text opened with {c} is not closed")),
                    Some(&q) if q == c => break,
                    Some('$') if c == '"' && chars.get(i + 1) == Some(&'{') => {
                        return Err(
                            "\"…${…}…\" (a GString) is not supported: join texts with + instead"
                                .into(),
                        );
                    }
                    Some('\\') => {
                        let escaped = chars.get(i + 1).ok_or("a text ends with \\")?;
                        s.push(match escaped {
                            'n' => '\n',
                            't' => '\t',
                            'r' => '\r',
                            '0' => '\0',
                            other => *other,
                        });
                        i += 2;
                        continue;
                    }
                    Some(&other) => s.push(other),
                }
                i += 1;
            }
            i += 1;
            out.push(Tok::Str(s));
        } else if c.is_ascii_digit() {
            let start = i;
            while chars
                .get(i)
                .is_some_and(|c| c.is_ascii_digit() || *c == '_')
            {
                i += 1;
            }
            let mut float = false;
            if chars.get(i) == Some(&'.') && chars.get(i + 1).is_some_and(char::is_ascii_digit) {
                float = true;
                i += 1;
                while chars.get(i).is_some_and(char::is_ascii_digit) {
                    i += 1;
                }
            }
            if matches!(chars.get(i), Some('e' | 'E')) {
                float = true;
                i += 1;
                if matches!(chars.get(i), Some('+' | '-')) {
                    i += 1;
                }
                while chars.get(i).is_some_and(char::is_ascii_digit) {
                    i += 1;
                }
            }
            let digits: String = chars[start..i].iter().filter(|c| **c != '_').collect();
            // Groovy's suffixes (1L, 1.5d…) name a Java type; the value is the same.
            if matches!(
                chars.get(i),
                Some('L' | 'l' | 'G' | 'g' | 'd' | 'D' | 'f' | 'F')
            ) {
                float |= matches!(chars[i], 'd' | 'D' | 'f' | 'F');
                i += 1;
            }
            out.push(if float {
                Tok::Float(
                    digits
                        .parse()
                        .map_err(|_| format!("{digits:?} is not a number"))?,
                )
            } else {
                Tok::Int(
                    digits
                        .parse()
                        .map_err(|_| format!("{digits} is out of the 64-bit integer range"))?,
                )
            });
        } else if c.is_alphabetic() || c == '_' {
            let start = i;
            while chars
                .get(i)
                .is_some_and(|c| c.is_alphanumeric() || *c == '_')
            {
                i += 1;
            }
            out.push(Tok::Ident(chars[start..i].iter().collect()));
        } else {
            let rest: String = chars[i..chars.len().min(i + 3)].iter().collect();
            let Some(sym) = SYMBOLS.iter().find(|s| rest.starts_with(**s)) else {
                return Err(format!("unexpected character {c:?}"));
            };
            i += sym.chars().count();
            out.push(Tok::Sym(sym));
        }
    }
    out.push(Tok::End);
    Ok(out)
}

// ---- Parsing ----

struct Parser {
    tokens: Vec<Tok>,
    at: usize,
}

impl Parser {
    fn peek(&self) -> &Tok {
        &self.tokens[self.at.min(self.tokens.len() - 1)]
    }

    fn next(&mut self) -> Tok {
        let tok = self.peek().clone();
        self.at += 1;
        tok
    }

    fn eat(&mut self, sym: &str) -> bool {
        if matches!(self.peek(), Tok::Sym(s) if *s == sym) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    fn expect(&mut self, sym: &str) -> Result<(), String> {
        if self.eat(sym) {
            Ok(())
        } else {
            Err(format!("expected `{sym}`, found {}", self.peek().show()))
        }
    }

    fn ternary(&mut self) -> Result<Node, String> {
        let cond = self.or()?;
        if self.eat("?:") {
            let other = self.ternary()?;
            return Ok(Node::Elvis(Box::new(cond), Box::new(other)));
        }
        if self.eat("?") {
            let yes = self.ternary()?;
            self.expect(":")?;
            let no = self.ternary()?;
            return Ok(Node::If(Box::new(cond), Box::new(yes), Box::new(no)));
        }
        Ok(cond)
    }

    fn or(&mut self) -> Result<Node, String> {
        let mut left = self.and()?;
        while self.eat("||") {
            left = Node::Or(Box::new(left), Box::new(self.and()?));
        }
        Ok(left)
    }

    fn and(&mut self) -> Result<Node, String> {
        let mut left = self.equality()?;
        while self.eat("&&") {
            left = Node::And(Box::new(left), Box::new(self.equality()?));
        }
        Ok(left)
    }

    fn equality(&mut self) -> Result<Node, String> {
        let mut left = self.relational()?;
        loop {
            let op = match self.peek() {
                Tok::Sym("==" | "===") => Op::Eq,
                Tok::Sym("!=" | "!==") => Op::Ne,
                Tok::Sym(s @ ("==~" | "=~")) => {
                    let whole = *s == "==~";
                    self.at += 1;
                    let Tok::Str(pattern) = self.next() else {
                        return Err(format!(
                            "{} needs a literal pattern on its right ('…')",
                            if whole { "==~" } else { "=~" }
                        ));
                    };
                    let regex = if whole {
                        super::predicate::whole_match_regex(&pattern)?
                    } else {
                        Regex::new(&pattern).map_err(|e| {
                            format!("{pattern:?} is not a valid regular expression: {e}")
                        })?
                    };
                    left = Node::Regex {
                        of: Box::new(left),
                        regex: Box::new(regex),
                        whole,
                    };
                    continue;
                }
                _ => return Ok(left),
            };
            self.at += 1;
            left = Node::Binary(op, Box::new(left), Box::new(self.relational()?));
        }
    }

    fn relational(&mut self) -> Result<Node, String> {
        let mut left = self.additive()?;
        loop {
            let op = match self.peek() {
                Tok::Sym("<") => Op::Lt,
                Tok::Sym("<=") => Op::Le,
                Tok::Sym(">") => Op::Gt,
                Tok::Sym(">=") => Op::Ge,
                Tok::Ident(word) if word == "in" => Op::In,
                _ => return Ok(left),
            };
            self.at += 1;
            left = Node::Binary(op, Box::new(left), Box::new(self.additive()?));
        }
    }

    fn additive(&mut self) -> Result<Node, String> {
        let mut left = self.multiplicative()?;
        loop {
            let op = match self.peek() {
                Tok::Sym("+") => Op::Add,
                Tok::Sym("-") => Op::Sub,
                _ => return Ok(left),
            };
            self.at += 1;
            left = Node::Binary(op, Box::new(left), Box::new(self.multiplicative()?));
        }
    }

    fn multiplicative(&mut self) -> Result<Node, String> {
        let mut left = self.unary()?;
        loop {
            let op = match self.peek() {
                Tok::Sym("*") => Op::Mul,
                Tok::Sym("%") => Op::Rem,
                Tok::Sym("/") => {
                    return Err(
                        "`/` is not supported (Groovy divides integers into decimals): use % or a comparison"
                            .into(),
                    );
                }
                _ => return Ok(left),
            };
            self.at += 1;
            left = Node::Binary(op, Box::new(left), Box::new(self.unary()?));
        }
    }

    fn unary(&mut self) -> Result<Node, String> {
        if self.eat("!") {
            return Ok(Node::Not(Box::new(self.unary()?)));
        }
        if self.eat("-") {
            return Ok(match self.unary()? {
                Node::Int(n) => Node::Int(-n),
                Node::Float(f) => Node::Float(-f),
                other => Node::Neg(Box::new(other)),
            });
        }
        self.postfix()
    }

    fn postfix(&mut self) -> Result<Node, String> {
        let mut node = self.primary()?;
        loop {
            let safe = if self.eat("?.") {
                true
            } else if self.eat(".") {
                false
            } else if self.eat("[") {
                let index = self.ternary()?;
                self.expect("]")?;
                node = Node::Index(Box::new(node), Box::new(index));
                continue;
            } else {
                return Ok(node);
            };
            let Tok::Ident(name) = self.next() else {
                return Err(format!(
                    "expected a field or method name after `.`, found {}",
                    self.tokens[self.at - 1].show()
                ));
            };
            if !self.eat("(") {
                node = Node::Field {
                    of: Box::new(node),
                    name,
                    safe,
                };
                continue;
            }
            let mut args = Vec::new();
            if !self.eat(")") {
                loop {
                    args.push(self.ternary()?);
                    if self.eat(")") {
                        break;
                    }
                    self.expect(",")?;
                }
            }
            let method = if name == "matches" {
                let [Node::Str(pattern)] = args.as_slice() else {
                    return Err("matches(…) takes one literal pattern ('…')".into());
                };
                Method::Matches(Box::new(super::predicate::whole_match_regex(pattern)?))
            } else {
                let Some((method, arity)) = Method::by_name(&name) else {
                    return Err(format!(
                        "the method {name}() is not one sluice's expressions know: get, startsWith, endsWith, contains, matches, replace, toLowerCase, toUpperCase, trim, length, size, isEmpty, equals, equalsIgnoreCase, toString"
                    ));
                };
                if args.len() != arity {
                    return Err(format!(
                        "{name}() takes {arity} argument(s), given {}",
                        args.len()
                    ));
                }
                method
            };
            node = Node::Call {
                of: Box::new(node),
                method,
                args,
                safe,
            };
        }
    }

    fn primary(&mut self) -> Result<Node, String> {
        Ok(match self.next() {
            Tok::Int(n) => Node::Int(n),
            Tok::Float(f) => Node::Float(f),
            Tok::Str(s) => Node::Str(s),
            Tok::Sym("(") => {
                let node = self.ternary()?;
                self.expect(")")?;
                node
            }
            Tok::Sym("[") => {
                let mut items = Vec::new();
                if !self.eat("]") {
                    loop {
                        items.push(self.ternary()?);
                        if self.eat("]") {
                            break;
                        }
                        self.expect(",")?;
                    }
                }
                Node::List(items)
            }
            Tok::Ident(name) => match name.as_str() {
                "null" | "undefined" => Node::Null,
                "true" => Node::Bool(true),
                "false" => Node::Bool(false),
                "value" => Node::Root(Root::Value),
                "key" => Node::Root(Root::Key),
                "topic" => Node::Root(Root::Topic),
                "header" => Node::Root(Root::Header),
                "if" | "else" | "return" | "def" | "var" | "let" | "const" | "for" | "while"
                | "function" => {
                    return Err(format!(
                        "`{name}`: statements are not supported, one expression is: e.g. `if (c) return a; return b` is `c ? a : b`"
                    ));
                }
                "keySchema" | "valueSchema" => {
                    return Err(format!(
                        "`{name}` is not supported: sluice's expressions see the record's key, value, topic and headers, not Connect's schemas"
                    ));
                }
                other => {
                    return Err(format!(
                        "`{other}` is not known: an expression reads value, key, topic and header (e.g. value.op == 'd')"
                    ));
                }
            },
            other => return Err(format!("expected a value, found {}", other.show())),
        })
    }
}

// ---- Evaluation ----

fn eval<'a>(node: &'a Node, record: &'a Record) -> Result<Val<'a>, String> {
    Ok(match node {
        Node::Null => Val::Null,
        Node::Bool(b) => Val::Bool(*b),
        Node::Int(n) => Val::Int(*n),
        Node::Float(f) => Val::Float(*f),
        Node::Str(s) => Val::Str(Cow::Borrowed(s)),
        Node::List(items) => Val::List(
            items
                .iter()
                .map(|n| eval(n, record))
                .collect::<Result<_, _>>()?,
        ),
        Node::Root(Root::Value) => record.value.value.as_deref().map_or(Val::Null, from_json),
        Node::Root(Root::Key) => record.key.value.as_deref().map_or(Val::Null, from_json),
        Node::Root(Root::Topic) => Val::Str(Cow::Borrowed(&record.topic)),
        Node::Root(Root::Header) => Val::Headers(record),
        Node::Field { of, name, safe } => {
            let of = eval(of, record)?;
            if *safe && matches!(of, Val::Null) {
                Val::Null
            } else {
                property(of, name)?
            }
        }
        Node::Index(of, index) => {
            let of = eval(of, record)?;
            match (of, eval(index, record)?) {
                (of @ (Val::Json(_) | Val::Headers(_)), Val::Str(name)) => property(of, &name)?,
                (Val::Json(text), Val::Int(n)) => element(text, n)?,
                (Val::List(items), Val::Int(n)) => usize::try_from(n)
                    .ok()
                    .and_then(|n| items.get(n).cloned())
                    .unwrap_or(Val::Null),
                (of, index) => {
                    return Err(format!("cannot index {} with {}", of.kind(), index.kind()));
                }
            }
        }
        Node::Call {
            of,
            method,
            args,
            safe,
        } => {
            let of = eval(of, record)?;
            if *safe && matches!(of, Val::Null) {
                Val::Null
            } else {
                let args = args
                    .iter()
                    .map(|a| eval(a, record))
                    .collect::<Result<Vec<_>, _>>()?;
                call(of, method, args)?
            }
        }
        Node::Not(inner) => Val::Bool(!eval(inner, record)?.truth()),
        Node::Neg(inner) => match eval(inner, record)? {
            Val::Int(n) => Val::Int(n.checked_neg().ok_or("integer overflow")?),
            Val::Float(f) => Val::Float(-f),
            other => return Err(format!("cannot negate {}", other.kind())),
        },
        Node::And(a, b) => Val::Bool(eval(a, record)?.truth() && eval(b, record)?.truth()),
        Node::Or(a, b) => Val::Bool(eval(a, record)?.truth() || eval(b, record)?.truth()),
        Node::If(cond, yes, no) => {
            if eval(cond, record)?.truth() {
                eval(yes, record)?
            } else {
                eval(no, record)?
            }
        }
        Node::Elvis(a, b) => {
            let a = eval(a, record)?;
            if a.truth() { a } else { eval(b, record)? }
        }
        Node::Regex { of, regex, whole } => match eval(of, record)? {
            // Groovy: `null ==~ …` and `null =~ …` are false.
            Val::Null => Val::Bool(false),
            value => {
                let text = value.text();
                Val::Bool(if *whole {
                    super::predicate::full_match(regex, &text)
                } else {
                    regex.is_match(text.as_ref())
                })
            }
        },
        Node::Binary(op, a, b) => binary(*op, eval(a, record)?, eval(b, record)?)?,
    })
}

/// `of.name`: a struct's field (an error when it has none, as Connect's `Struct.get`), a
/// header (null when absent, as a map's), a header's `value`.
fn property<'a>(of: Val<'a>, name: &str) -> Result<Val<'a>, String> {
    match of {
        Val::Json(text) if text.starts_with('{') => {
            let members = Members::parse(text)?;
            members
                .get(name)
                .map(|raw| from_json(raw.get()))
                .ok_or_else(|| format!("{name} is not a valid field name"))
        }
        Val::Headers(record) => Ok(record
            .headers
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map_or(Val::Null, |(_, v)| Val::Header(v))),
        Val::Header(value) if name == "value" => Ok(Val::Str(Cow::Borrowed(value))),
        Val::Null => Err(format!("cannot get property '{name}' on null object")),
        other => Err(format!("{} has no property '{name}'", other.kind())),
    }
}

fn element(text: &str, n: i64) -> Result<Val<'_>, String> {
    let items = elements(text).ok_or("cannot index a struct with a number")?;
    Ok(usize::try_from(n)
        .ok()
        .and_then(|n| items.get(n))
        .map_or(Val::Null, |raw| from_json(raw.get())))
}

fn call<'a>(of: Val<'a>, method: &Method, args: Vec<Val<'a>>) -> Result<Val<'a>, String> {
    let text_arg = |n: usize| -> Result<String, String> {
        match args.get(n) {
            Some(Val::Str(s)) => Ok(s.to_string()),
            Some(other) => Err(format!("expected a text argument, given {}", other.kind())),
            None => Err("an argument is missing".into()),
        }
    };
    match (method, &of) {
        (Method::Get, Val::Json(_) | Val::Headers(_)) => {
            let name = text_arg(0)?;
            property(of, &name)
        }
        (Method::Size, Val::Str(s)) | (Method::Length, Val::Str(s)) => {
            Ok(Val::Int(s.encode_utf16().count() as i64))
        }
        (Method::Size, Val::List(items)) => Ok(Val::Int(items.len() as i64)),
        (Method::Size, Val::Json(text)) => Ok(Val::Int(match elements(text) {
            Some(items) => items.len(),
            None => Members::parse(text)?.0.len(),
        } as i64)),
        (Method::ToString, value) => Ok(Val::Str(Cow::Owned(value.text().into_owned()))),
        (Method::Equals, value) => Ok(Val::Bool(equal(value, args.first().unwrap_or(&Val::Null)))),
        (_, Val::Str(s)) => {
            let s = s.as_ref();
            Ok(match method {
                Method::StartsWith => Val::Bool(s.starts_with(&text_arg(0)?)),
                Method::EndsWith => Val::Bool(s.ends_with(&text_arg(0)?)),
                Method::Contains => Val::Bool(s.contains(&text_arg(0)?)),
                Method::Matches(regex) => Val::Bool(super::predicate::full_match(regex, s)),
                Method::Replace => Val::Str(Cow::Owned(s.replace(&text_arg(0)?, &text_arg(1)?))),
                Method::ToLowerCase => Val::Str(Cow::Owned(s.to_lowercase())),
                Method::ToUpperCase => Val::Str(Cow::Owned(s.to_uppercase())),
                Method::Trim => Val::Str(Cow::Owned(s.trim().to_owned())),
                Method::IsEmpty => Val::Bool(s.is_empty()),
                Method::EqualsIgnoreCase => Val::Bool(match args.first() {
                    Some(Val::Str(other)) => s.to_lowercase() == other.to_lowercase(),
                    _ => false,
                }),
                _ => return Err(format!("no such method on a text: {method:?}")),
            })
        }
        (Method::IsEmpty, Val::List(items)) => Ok(Val::Bool(items.is_empty())),
        (Method::IsEmpty, Val::Json(_)) => Ok(Val::Bool(!of.truth())),
        (_, Val::Null) => Err("cannot invoke a method on null object".into()),
        (method, other) => Err(format!(
            "{} has no method {}",
            other.kind(),
            format!("{method:?}").to_lowercase()
        )),
    }
}

/// Groovy's `==`: numbers by value across types, texts by characters, null only to null.
fn equal(a: &Val<'_>, b: &Val<'_>) -> bool {
    match (a, b) {
        (Val::Null, Val::Null) => true,
        (Val::Null, _) | (_, Val::Null) => false,
        (Val::Bool(a), Val::Bool(b)) => a == b,
        (Val::Str(a), Val::Str(b)) => a == b,
        (Val::Str(a), Val::Header(b)) | (Val::Header(b), Val::Str(a)) => a == b,
        (Val::Json(a), Val::Json(b)) => a == b,
        (Val::List(a), Val::List(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(x, y)| equal(x, y))
        }
        (Val::Json(a), Val::List(b)) | (Val::List(b), Val::Json(a)) => {
            elements(a).is_some_and(|items| {
                items.len() == b.len()
                    && items
                        .iter()
                        .zip(b)
                        .all(|(x, y)| equal(&from_json(x.get()), y))
            })
        }
        _ => compare_numbers(a, b) == Some(Ordering::Equal),
    }
}

fn compare_numbers(a: &Val<'_>, b: &Val<'_>) -> Option<Ordering> {
    match (a, b) {
        (Val::Int(a), Val::Int(b)) => Some(a.cmp(b)),
        (Val::Int(a), Val::Float(b)) => (*a as f64).partial_cmp(b),
        (Val::Float(a), Val::Int(b)) => a.partial_cmp(&(*b as f64)),
        (Val::Float(a), Val::Float(b)) => a.partial_cmp(b),
        _ => None,
    }
}

/// Groovy's ordering: numbers by value, texts by characters, null before everything.
fn order(a: &Val<'_>, b: &Val<'_>) -> Result<Ordering, String> {
    match (a, b) {
        (Val::Null, Val::Null) => Ok(Ordering::Equal),
        (Val::Null, _) => Ok(Ordering::Less),
        (_, Val::Null) => Ok(Ordering::Greater),
        (Val::Str(a), Val::Str(b)) => Ok(a.cmp(b)),
        (Val::Bool(a), Val::Bool(b)) => Ok(a.cmp(b)),
        _ => compare_numbers(a, b)
            .ok_or_else(|| format!("cannot compare {} with {}", a.kind(), b.kind())),
    }
}

fn binary<'a>(op: Op, a: Val<'a>, b: Val<'a>) -> Result<Val<'a>, String> {
    let number = |v: &Val<'_>| matches!(v, Val::Int(_) | Val::Float(_));
    Ok(match op {
        Op::Eq => Val::Bool(equal(&a, &b)),
        Op::Ne => Val::Bool(!equal(&a, &b)),
        Op::Lt => Val::Bool(order(&a, &b)? == Ordering::Less),
        Op::Le => Val::Bool(order(&a, &b)? != Ordering::Greater),
        Op::Gt => Val::Bool(order(&a, &b)? == Ordering::Greater),
        Op::Ge => Val::Bool(order(&a, &b)? != Ordering::Less),
        Op::In => Val::Bool(match &b {
            Val::List(items) => items.iter().any(|item| equal(&a, item)),
            Val::Json(text) => match elements(text) {
                Some(items) => items.iter().any(|raw| equal(&a, &from_json(raw.get()))),
                None => return Err("`in` needs a list on its right, given a struct".into()),
            },
            other => {
                return Err(format!(
                    "`in` needs a list on its right, given {}",
                    other.kind()
                ));
            }
        }),
        Op::Add if matches!(a, Val::Str(_)) || matches!(b, Val::Str(_)) => {
            Val::Str(Cow::Owned(format!("{}{}", a.text(), b.text())))
        }
        _ if !(number(&a) && number(&b)) => {
            return Err(format!(
                "{op:?} needs numbers (or a text for +), given {} and {}",
                a.kind(),
                b.kind()
            )
            .to_lowercase());
        }
        Op::Add | Op::Sub | Op::Mul | Op::Rem => match (a, b) {
            (Val::Int(x), Val::Int(y)) => Val::Int(
                match op {
                    Op::Add => x.checked_add(y),
                    Op::Sub => x.checked_sub(y),
                    Op::Mul => x.checked_mul(y),
                    _ if y == 0 => return Err("division by zero (% 0)".into()),
                    _ => x.checked_rem(y),
                }
                .ok_or("integer overflow")?,
            ),
            (x, y) => {
                let (x, y) = (float(&x), float(&y));
                Val::Float(match op {
                    Op::Add => x + y,
                    Op::Sub => x - y,
                    Op::Mul => x * y,
                    _ => x % y,
                })
            }
        },
    })
}

fn float(v: &Val<'_>) -> f64 {
    match v {
        Val::Int(n) => *n as f64,
        Val::Float(f) => *f,
        _ => f64::NAN,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transform::json::{Data, Schema};

    fn record(value: Option<&str>) -> Record {
        Record {
            topic: "p.public.orders".into(),
            key: Data {
                schema: Schema::Opaque,
                value: Some(r#"{"id":7}"#.into()),
            },
            value: Data {
                schema: if value.is_some() {
                    Schema::Opaque
                } else {
                    Schema::None
                },
                value: value.map(str::to_owned),
            },
            headers: vec![("origin".into(), "dbz".into())],
            header_schemas: Vec::new(),
            partition: None,
        }
    }

    const UPDATE: &str = r#"{"before":{"id":7,"status":"new","qty":2},"after":{"id":7,"status":"paid","qty":3,"price":1.5,"tags":["a","b"],"note":null},"source":{"table":"orders","snapshot":"false"},"op":"u"}"#;
    const DELETE: &str = r#"{"before":{"id":7,"status":"paid","qty":3},"after":null,"source":{"table":"orders"},"op":"d"}"#;

    fn eval_on(expr: &str, value: Option<&str>) -> Result<String, String> {
        let record = record(value);
        let expr = Expr::parse(expr)?;
        let out = expr.eval(&record)?;
        Ok(match out {
            Val::Str(s) => format!("{s:?}"),
            other => other.text().into_owned(),
        })
    }

    #[test]
    fn the_common_conditions_read_as_groovy_reads_them() {
        let cases = [
            ("value.op == 'u'", "true"),
            ("value.op == \"d\"", "false"),
            (
                "value.op === 'u' && value.get('after').get('qty') > 2",
                "true",
            ),
            ("value.after.qty > value.before.qty", "true"),
            ("value.after.qty == 3L", "true"),
            ("value.after.price >= 1.5", "true"),
            (
                "value.after.price == 1.5 && value.after.qty != 3.0",
                "false",
            ),
            ("value.op in ['c', 'u']", "true"),
            ("'b' in value.after.tags", "true"),
            ("value.after.tags.size()", "2"),
            ("value.after.tags[1]", "\"b\""),
            ("value.after.note == null", "true"),
            ("value.after.note < 0", "true"),
            ("value.after.note ?: 'none'", "\"none\""),
            ("!value.after.note", "true"),
            (
                "value.after.status.startsWith('pa') && value.source['table'] == 'orders'",
                "true",
            ),
            ("value.after.status ==~ 'p.*d'", "true"),
            ("value.after.status ==~ 'p'", "false"),
            ("value.after.status =~ 'ai'", "true"),
            ("value.after.status.matches('pa.d')", "true"),
            (
                "topic.replace('.public.', '.archive.')",
                "\"p.archive.orders\"",
            ),
            (
                "value.op == 'u' ? topic + '.' + value.after.status : null",
                "\"p.public.orders.paid\"",
            ),
            ("key.id % 2 == 1 && -key.id < 0", "true"),
            (
                "header.origin.value == 'dbz' && header.missing == null",
                "true",
            ),
            ("header.missing?.value", "null"),
            ("value.source.snapshot != 'true' || value.op == 'r'", "true"),
            ("(value.after.qty + 1) * 2", "8"),
            ("'n=' + value.after.qty", "\"n=3\""),
        ];
        for (expr, want) in cases {
            assert_eq!(eval_on(expr, Some(UPDATE)).as_deref(), Ok(want), "{expr}");
        }
    }

    #[test]
    fn errors_are_groovys() {
        // A property of null, a field a struct does not have, an order between a text and a
        // number: errors, as in Groovy (the record then takes the error policy).
        for (expr, value, want) in [
            (
                "value.after.id == 1",
                Some(DELETE),
                "cannot get property 'id' on null object",
            ),
            (
                "value.after.nope",
                Some(UPDATE),
                "nope is not a valid field name",
            ),
            (
                "value.after.status > 1",
                Some(UPDATE),
                "cannot compare a text with a number",
            ),
            ("value.op", None, "cannot get property 'op' on null object"),
            (
                "value.after.qty.startsWith('1')",
                Some(UPDATE),
                "a number has no method startswith",
            ),
        ] {
            let got = eval_on(expr, value).unwrap_err();
            assert!(got.contains(want), "{expr}: {got}");
        }
        // The delete's guard short-circuits the property of null.
        assert_eq!(
            eval_on("value.op == 'd' || value.after.id == 1", Some(DELETE)).as_deref(),
            Ok("true")
        );
        assert_eq!(eval_on("value?.op", None).as_deref(), Ok("null"));
    }

    #[test]
    fn what_is_not_the_language_is_refused_when_parsed() {
        for (expr, want) in [
            ("value.op == 'd'; true", "no statements"),
            ("\"${value.op}\"", "GString"),
            ("valueSchema.name() == 'x'", "Connect's schemas"),
            ("record.op", "`record` is not known"),
            ("value.op.foo()", "foo() is not one"),
            ("value.after.qty / 2", "`/` is not supported"),
            ("value.op ==~ value.x", "literal pattern"),
            ("value.op == ", "expected a value"),
            ("value.op == 'd", "not closed"),
            ("{ it -> true }", "expected a value"),
            (
                "if (value.op == 'd') { return 'x' }",
                "statements are not supported",
            ),
            (
                "value.after.x.matches('(')",
                "not a valid regular expression",
            ),
            (
                "value.after.x.matches('A'.toLowerCase())",
                "one literal pattern",
            ),
        ] {
            let got = Expr::parse(expr).unwrap_err();
            assert!(got.contains(want), "{expr}: {got}");
        }
    }

    #[test]
    fn literal_results_are_known_for_routing() {
        let expr =
            Expr::parse("value.op == 'd' ? 'deletes' : (value.op == 'c' ? 'creates' : null)")
                .unwrap();
        assert_eq!(expr.literal_results(), ["deletes", "creates"]);
        let expr = Expr::parse("value.op == 'd' ? topic + '.x' : 'all'").unwrap();
        assert_eq!(expr.literal_results(), ["all"]);
    }
}
