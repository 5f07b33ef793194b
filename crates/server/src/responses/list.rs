//! `GET /v1/responses/{id}/input_items`: a stored response's input items as OpenAI lists
//! them (`{object: "list", data, first_id, last_id, has_more}`, newest first unless
//! `order=asc`, `limit` 1–100 (20), paged with `after`/`before` item ids).
//!
//! The items are every item the response was given: those of the responses it continued
//! (their input and output) and then its own input, each with an `id` and a `type` (a string
//! `input` is listed as one `message` with one `input_text` part).

use serde::Deserialize;
use serde_json::{json, Value};

use crate::ApiError;

/// The query string.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct ListQuery {
    limit: Option<i64>,
    order: Option<String>,
    after: Option<String>,
    before: Option<String>,
}

/// The list object of `items` (oldest first, as stored) for the response `response_id`.
pub(crate) fn input_items(
    response_id: &str,
    items: &[Value],
    query: &ListQuery,
) -> Result<Value, ApiError> {
    let limit = query.limit.unwrap_or(20);
    if !(1..=100).contains(&limit) {
        return Err(ApiError::bad(
            "limit",
            format!("limit = {limit}: must be between 1 and 100"),
        ));
    }
    let descending = match query.order.as_deref() {
        None | Some("desc") => true,
        Some("asc") => false,
        Some(other) => {
            return Err(ApiError::bad(
                "order",
                format!("order = {other:?}: must be \"asc\" or \"desc\""),
            ))
        }
    };
    let mut all: Vec<Value> = items
        .iter()
        .enumerate()
        .map(|(i, item)| listed(response_id, i, item))
        .collect();
    if descending {
        all.reverse();
    }
    let position = |param: &str, id: &str| {
        all.iter()
            .position(|item| item["id"] == id)
            .ok_or_else(|| ApiError::bad(param, format!("{param} = {id:?}: no such input item")))
    };
    let start = match &query.after {
        Some(id) => position("after", id)? + 1,
        None => 0,
    };
    let end = match &query.before {
        Some(id) => position("before", id)?,
        None => all.len(),
    };
    let window = all.get(start..end.max(start)).unwrap_or_default();
    let limit = usize::try_from(limit).unwrap_or(20);
    let page = &window[..window.len().min(limit)];
    Ok(json!({
        "object": "list",
        "data": page,
        "first_id": page.first().map(|i| i["id"].clone()),
        "last_id": page.last().map(|i| i["id"].clone()),
        "has_more": window.len() > page.len(),
    }))
}

/// One item as listed: with `type` (`message` when it has only a role), an `id` (its own, or
/// one made from the response's id and its place, the same on every call) and a message's
/// string content as one text part.
fn listed(response_id: &str, index: usize, item: &Value) -> Value {
    let mut item = item.clone();
    let Some(object) = item.as_object_mut() else {
        return item;
    };
    if !object.contains_key("type") && object.contains_key("role") {
        object.insert("type".into(), json!("message"));
    }
    if !object.get("id").is_some_and(Value::is_string) {
        let kind = match object.get("type").and_then(Value::as_str) {
            Some("message") => "msg",
            Some("function_call") => "fc",
            Some("function_call_output") => "fco",
            Some("reasoning") => "rs",
            _ => "item",
        };
        let tail = response_id.strip_prefix("resp_").unwrap_or(response_id);
        object.insert("id".into(), json!(format!("{kind}_{tail}_{index}")));
    }
    if let Some(Value::String(text)) = object.get("content") {
        let part = if object.get("role").and_then(Value::as_str) == Some("assistant") {
            "output_text"
        } else {
            "input_text"
        };
        let content = json!([{"type": part, "text": text}]);
        object.insert("content".into(), content);
    }
    item
}

#[cfg(test)]
mod tests {
    use super::*;

    fn items() -> Vec<Value> {
        vec![
            json!({"type": "message", "role": "user", "content": "hi"}),
            json!({"role": "assistant", "content": "hello", "id": "msg_given"}),
            json!({"type": "function_call_output", "call_id": "c1", "output": "4"}),
        ]
    }

    fn query(limit: Option<i64>, order: Option<&str>, after: Option<&str>) -> ListQuery {
        ListQuery {
            limit,
            order: order.map(str::to_owned),
            after: after.map(str::to_owned),
            before: None,
        }
    }

    #[test]
    fn newest_first_with_ids_types_and_text_parts() {
        let list = input_items("resp_abc", &items(), &ListQuery::default()).unwrap();
        assert_eq!(list["object"], "list");
        let data = list["data"].as_array().unwrap();
        assert_eq!(data.len(), 3);
        assert_eq!(data[0]["id"], "fco_abc_2");
        assert_eq!(data[1]["id"], "msg_given");
        assert_eq!(data[1]["type"], "message");
        assert_eq!(data[1]["content"][0]["type"], "output_text");
        assert_eq!(
            data[2]["content"][0],
            json!({"type": "input_text", "text": "hi"})
        );
        assert_eq!(list["first_id"], "fco_abc_2");
        assert_eq!(list["last_id"], "msg_abc_0");
        assert_eq!(list["has_more"], false);
    }

    #[test]
    fn pages_follow_after_in_either_order() {
        let first = input_items("resp_abc", &items(), &query(Some(2), Some("asc"), None)).unwrap();
        assert_eq!(first["has_more"], true);
        assert_eq!(first["last_id"], "msg_given");
        let rest = input_items(
            "resp_abc",
            &items(),
            &query(Some(2), Some("asc"), Some("msg_given")),
        )
        .unwrap();
        assert_eq!(rest["data"].as_array().unwrap().len(), 1);
        assert_eq!(rest["first_id"], "fco_abc_2");
        assert_eq!(rest["has_more"], false);
    }

    #[test]
    fn bad_queries_are_400s_naming_the_parameter() {
        for (q, param) in [
            (query(Some(0), None, None), "limit"),
            (query(Some(101), None, None), "limit"),
            (query(None, Some("up"), None), "order"),
            (query(None, None, Some("msg_nope")), "after"),
        ] {
            let e = input_items("resp_abc", &items(), &q).unwrap_err();
            assert!(
                matches!(&e, ApiError::BadRequest { param: Some(p), .. } if p == param),
                "{e:?}"
            );
        }
    }
}
