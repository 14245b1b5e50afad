//! The MySQL source's own decoding of what the server sends: GTID sets and positions (from
//! the server and the state file), MariaDB's GTID event, DDL statements of QUERY events. (Row
//! images: `source::mysql::rows::hostile`; the binlog's event framing is `mysql_common`'s.)

use proptest::prelude::*;

use crate::source::mysql::ddl::{ChangeType, classify};
use crate::source::mysql::server::{MariadbGtid, MariadbGtidPos, MysqlGtidSet};

fn uuid() -> impl Strategy<Value = String> {
    "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
}

/// A MySQL GTID set's text: valid (any ranges, overlapping, unsorted) or nearly so.
fn gtid_set_text() -> impl Strategy<Value = String> {
    let interval = prop_oneof![
        (1..u64::MAX).prop_map(|n| n.to_string()),
        (1..1000u64, 0..1000u64).prop_map(|(a, len)| format!("{a}-{}", a + len)),
        (any::<u64>(), any::<u64>()).prop_map(|(a, b)| format!("{a}-{b}")),
        "[-0-9: ]{0,8}",
    ];
    let member =
        (uuid(), proptest::collection::vec(interval, 0..4)).prop_map(|(uuid, intervals)| {
            let mut text = uuid;
            for interval in intervals {
                text.push(':');
                text.push_str(&interval);
            }
            text
        });
    prop_oneof![
        4 => proptest::collection::vec(member, 0..4).prop_map(|m| m.join(",")),
        1 => "[-0-9a-f:, \n]{0,80}",
        1 => any::<String>(),
    ]
}

fn ddl_word() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "CREATE",
            "ALTER",
            "DROP",
            "RENAME",
            "TABLE",
            "TABLES",
            "DATABASE",
            "SCHEMA",
            "IF",
            "NOT",
            "EXISTS",
            "INDEX",
            "UNIQUE",
            "ON",
            "TO",
            "TEMPORARY",
            "TRUNCATE",
            "VIEW",
            ".",
            ",",
            "(",
            ")",
            ";",
            "/*",
            "*/",
            "#",
            "\n",
            "`",
            "``",
            "'",
            "\"",
        ])
        .prop_map(str::to_owned),
        "[a-z_]{1,6}",
        "`[^`]{0,6}`",
        any::<char>().prop_map(String::from),
    ]
}

/// An identifier in backquotes, as MySQL writes one (a backquote doubled).
fn quoted(name: &str) -> String {
    format!("`{}`", name.replace('`', "``"))
}

proptest! {
    #![proptest_config(super::config())]

    /// Any text: a set or an error; a set's text parses back to the same set.
    #[test]
    fn mysql_gtid_sets_parse_or_fail_and_round_trip(text in gtid_set_text()) {
        if let Ok(set) = MysqlGtidSet::parse(&text) {
            let again = MysqlGtidSet::parse(&set.to_string());
            prop_assert_eq!(again.ok(), Some(set));
        }
    }

    /// MariaDB positions: any text parses or fails; a position's text parses back to itself.
    #[test]
    fn mariadb_positions_parse_or_fail_and_round_trip(
        text in prop_oneof![
            "[-0-9, ]{0,40}",
            any::<String>(),
            proptest::collection::vec((any::<u32>(), any::<u32>(), any::<u64>()), 0..5)
                .prop_map(|g| g.iter().map(|(d, s, n)| format!("{d}-{s}-{n}")).collect::<Vec<_>>().join(",")),
        ],
    ) {
        if let Ok(pos) = MariadbGtidPos::parse(&text) {
            let again = MariadbGtidPos::parse(&pos.to_string());
            prop_assert_eq!(again.ok(), Some(pos));
        }
    }

    /// MariaDB's GTID event body: any bytes; a body of its layout decodes to its fields.
    #[test]
    fn mariadb_gtid_events_decode_or_fail(
        body in proptest::collection::vec(any::<u8>(), 0..20),
        server in any::<u32>(),
        (sequence, domain, flags) in (any::<u64>(), any::<u32>(), any::<u8>()),
    ) {
        let decoded = MariadbGtid::from_event(&body, server);
        prop_assert_eq!(decoded.is_some(), body.len() >= 13);
        let mut event = sequence.to_le_bytes().to_vec();
        event.extend_from_slice(&domain.to_le_bytes());
        event.push(flags);
        let (gtid, read_flags) = MariadbGtid::from_event(&event, server).expect("a whole body");
        prop_assert_eq!((gtid.sequence, gtid.domain, gtid.server, read_flags), (sequence, domain, server, flags));
        // Its text is a position's text.
        let mut pos = MariadbGtidPos::default();
        pos.add(gtid);
        prop_assert_eq!(MariadbGtidPos::parse(&gtid.to_string()).ok(), Some(pos));
    }

    /// QUERY events' statements: any text, and token soup of DDL words, comments and quotes,
    /// is classified or not, never a panic.
    #[test]
    fn ddl_statements_never_panic(
        text in prop_oneof![
            any::<String>(),
            proptest::collection::vec(ddl_word(), 0..24).prop_map(|w| w.join(" ")),
            proptest::collection::vec(ddl_word(), 0..24).prop_map(|w| w.concat()),
        ],
        db in "[a-z`]{0,4}",
    ) {
        let _ = classify(&text, &db);
    }

    /// A table's name, whatever characters it has, comes back from the statements that name
    /// it in backquotes.
    #[test]
    fn ddl_table_names_round_trip(
        db in "[^\\x00]{1,8}",
        table in "[^\\x00]{1,8}",
        verb in prop::sample::select(vec!["CREATE TABLE", "ALTER TABLE", "DROP TABLE IF EXISTS", "CREATE TABLE IF NOT EXISTS"]),
    ) {
        let sql = format!("/* c */ {verb} {}.{} (id INT)", quoted(&db), quoted(&table));
        let statement = classify(&sql, "other").expect("a DDL statement");
        let kind = match verb.split(' ').next() {
            Some("CREATE") => ChangeType::Create,
            Some("ALTER") => ChangeType::Alter,
            _ => ChangeType::Drop,
        };
        prop_assert_eq!(statement.tables, vec![(kind, db, table)]);
    }
}
