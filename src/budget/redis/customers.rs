//! A key's customers as the Redis store remembers them (see
//! `lua/common.lua`): each one's member `<key>/<customer>` of the tag's
//! `cust` sorted set, every score 0 so it reads in id order
//! (ZRANGEBYLEX), and its `seen:<key>/<customer>` field of the spend hash,
//! `<last call ms>|<hold ms>[|<counter period>]...`. `reserve.lua` writes
//! both, `sweep.lua` forgets both.

use super::connection::{CallPolicy, Connection, Request};
use super::scripts::{store_time, TagKeys};
use crate::budget::{CustomerSeen, StoreError};

/// Members read per round trip.
const PAGE: usize = 1_000;

/// Up to `limit` of `key`'s customers under the tag, by id, those after
/// `after` when given. A member forgotten between the two reads is
/// skipped, and the page filled from further on.
pub(super) async fn page(
    connection: &Connection,
    policy: CallPolicy,
    keys: &TagKeys,
    key: &str,
    after: Option<&str>,
    limit: usize,
) -> Result<Vec<CustomerSeen>, StoreError> {
    let prefix = format!("{key}/");
    let mut start = match after {
        Some(after) => format!("({prefix}{after}"),
        None => format!("[{prefix}"),
    };
    // `0` follows `/`, and a key id holds no `/`: every member of this key,
    // and of no other, sorts below it.
    let end = format!("({key}0");
    let mut customers = Vec::new();
    while customers.len() < limit {
        let want = (limit - customers.len()).min(PAGE);
        let mut range = ::redis::cmd("ZRANGEBYLEX");
        range
            .arg(keys.cust())
            .arg(&start)
            .arg(&end)
            .arg("LIMIT")
            .arg(0)
            .arg(want);
        let members: Vec<String> = connection
            .call(policy, "list customers", Request::Command(&range))
            .await?;
        let Some(last) = members.last() else {
            break;
        };
        start = format!("({last}");
        let mut hmget = ::redis::cmd("HMGET");
        hmget.arg(keys.spend());
        for member in &members {
            hmget.arg(format!("seen:{member}"));
        }
        let entries: Vec<Option<String>> = connection
            .call(policy, "read customers", Request::Command(&hmget))
            .await?;
        for (member, entry) in members.iter().zip(entries) {
            let Some(entry) = entry else { continue };
            let id = member.strip_prefix(&prefix).unwrap_or(member);
            customers.push(CustomerSeen {
                id: id.to_owned(),
                last_call: store_time(last_call(&entry).ok_or_else(|| {
                    StoreError::Unavailable(format!(
                        "unreadable customer entry seen:{member} = {entry:?}"
                    ))
                })?)?,
            });
        }
        if members.len() < want {
            break;
        }
    }
    Ok(customers)
}

/// The last call (ms) a `seen:` value holds.
fn last_call(entry: &str) -> Option<i64> {
    entry.split('|').next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_starts_with_the_last_call() {
        assert_eq!(
            last_call("1764500000123|1764500060123|2026-11"),
            Some(1_764_500_000_123)
        );
        assert_eq!(
            last_call("1764500000123|1764500060123"),
            Some(1_764_500_000_123)
        );
        assert_eq!(last_call("x|1"), None);
    }
}
