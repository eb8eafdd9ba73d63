//! The store's view of `tg:meta`, without Redis: what each reading of
//! it leads to. (With Redis: `redis::tests::epoch`.)

use super::*;
use Reading::{Confirming, First};

fn epoch(id: &str, created_ms: i64) -> Epoch {
    Epoch {
        id: Arc::from(id),
        created_ms,
    }
}

fn meta(id: &str, created_ms: i64, accepted: bool) -> Meta {
    Meta {
        layout: LAYOUT,
        epoch: Some(epoch(id, created_ms)),
        accepted,
    }
}

#[test]
fn a_store_that_saw_no_epoch_creates_or_adopts_one() {
    assert_eq!(step(&View::Unknown, None, First), Step::Create);
    for accepted in [false, true] {
        assert_eq!(
            step(&View::Unknown, Some(&meta("e1", 5, accepted)), First),
            Step::Become(View::Serving(epoch("e1", 5)))
        );
    }
}

#[test]
fn a_vanished_epoch_fails_closed_until_a_later_one_is_accepted() {
    let serving = View::Serving(epoch("e1", 5));
    let lost = View::Lost(epoch("e1", 5));
    assert_eq!(
        step(&serving, Some(&meta("e1", 5, false)), First),
        Step::Become(serving.clone())
    );
    // Missing twice (see the next test).
    assert_eq!(step(&serving, None, Confirming), Step::Become(lost.clone()));
    // Never recreated by a store that saw one.
    assert_eq!(step(&lost, None, First), Step::Become(lost.clone()));
    // Another gateway created one on the empty Redis: not accepted.
    assert_eq!(
        step(&serving, Some(&meta("e2", 9, false)), First),
        Step::Become(lost.clone())
    );
    assert_eq!(
        step(&lost, Some(&meta("e2", 9, false)), First),
        Step::Become(lost.clone())
    );
    // The same epoch coming back does not mend what was lost.
    assert_eq!(
        step(&lost, Some(&meta("e1", 5, false)), First),
        Step::Become(lost.clone())
    );
    // An accepted epoch older than the one lost is not adopted.
    assert_eq!(
        step(&lost, Some(&meta("e0", 1, true)), First),
        Step::Become(lost.clone())
    );
    let accepted = Step::Become(View::Serving(epoch("e3", 12)));
    assert_eq!(step(&lost, Some(&meta("e3", 12, true)), First), accepted);
    assert_eq!(step(&serving, Some(&meta("e3", 12, true)), First), accepted);
}

#[test]
fn one_read_finding_tg_meta_missing_loses_no_epoch() {
    let serving = View::Serving(epoch("e1", 5));
    let lost = View::Lost(epoch("e1", 5));
    let refused = View::Refused {
        found: LAYOUT + 1,
        saw: Some(epoch("e1", 5)),
    };
    // A read that may have been answered before tg:meta was created is
    // confirmed by another.
    for view in [&serving, &refused] {
        assert_eq!(step(view, None, First), Step::ConfirmMissing);
        assert_eq!(step(view, None, Confirming), Step::Become(lost.clone()));
    }
    // Found again: nothing was lost.
    assert_eq!(
        step(&serving, Some(&meta("e1", 5, false)), Confirming),
        Step::Become(serving.clone())
    );
    // A lost epoch stays lost without a second read, and a store that saw
    // none creates one.
    assert_eq!(step(&lost, None, First), Step::Become(lost.clone()));
    assert_eq!(step(&View::Unknown, None, First), Step::Create);
    assert_eq!(step(&View::Unknown, None, Confirming), Step::Create);
}

#[test]
fn layouts_are_refused_when_newer_and_migrated_when_older() {
    let newer = Meta {
        layout: LAYOUT + 1,
        ..meta("e1", 5, false)
    };
    assert_eq!(
        step(&View::Unknown, Some(&newer), First),
        Step::Become(View::Refused {
            found: LAYOUT + 1,
            saw: None
        })
    );
    let serving = View::Serving(epoch("e1", 5));
    let refused = View::Refused {
        found: LAYOUT + 1,
        saw: Some(epoch("e1", 5)),
    };
    assert_eq!(
        step(&serving, Some(&newer), First),
        Step::Become(refused.clone())
    );
    assert_eq!(
        step(&refused, None, Confirming),
        Step::Become(View::Lost(epoch("e1", 5)))
    );
    let old = Meta {
        layout: 0,
        epoch: None,
        accepted: false,
    };
    assert_eq!(
        step(&View::Unknown, Some(&old), First),
        Step::Migrate { from: 0 }
    );
    assert_eq!(step(&serving, Some(&old), First), Step::Migrate { from: 0 });
}

#[test]
fn meta_fields_are_read_with_a_missing_layout_as_0() {
    let fields = |list: &[&str]| list.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    assert_eq!(
        Meta::parse(&fields(&["epoch", "e1", "created_at", "5"])).unwrap(),
        Meta {
            layout: 0,
            epoch: Some(epoch("e1", 5)),
            accepted: false
        }
    );
    let layout = LAYOUT.to_string();
    assert_eq!(
        Meta::parse(&fields(&[
            "layout",
            &layout,
            "epoch",
            "e1",
            "created_at",
            "5",
            "accepted_at",
            "6"
        ]))
        .unwrap(),
        meta("e1", 5, true)
    );
    assert!(Meta::parse(&fields(&["layout", "1"])).is_err());
    assert!(Meta::parse(&fields(&["layout", "x", "epoch", "e1"])).is_err());
}
