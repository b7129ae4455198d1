"""Rating sheets handed to people (γ's answers, FEWL's answer pairs): the page's script and
style, and the check that ties a rating to the exact text that was rated."""

from __future__ import annotations

import csv
import hashlib
from collections.abc import Iterator, Mapping
from pathlib import Path

from veracity.data.jsonl import csv_reader
from veracity.errors import DataError
from veracity.text import csv_uncell


def answer_check(prompt: str, answer: str) -> str:
    """8 hex digits identifying the exact prompt and answer that were rated."""
    return hashlib.sha256(f"{prompt}\x00{answer}".encode("utf-8", "surrogatepass")).hexdigest()[:8]


SHEET_JS = """
function csvCell(v){v=String(v);if(/^'*[=+\\-@\\t\\r]/.test(v)){v="'"+v;}
  return '"'+v.replace(/"/g,'""')+'"';}
function download(){
  var rater=document.getElementById('rater').value.trim()||'rater';
  var lines=['item_id,answer_check,rating,comment'];var missing=0;
  document.querySelectorAll('.item').forEach(function(el){
    var picked=el.querySelector('input[type=radio]:checked');if(!picked){missing++;}
    lines.push([el.dataset.id,el.dataset.check,picked?picked.value:'',
                el.querySelector('textarea').value].map(csvCell).join(','));});
  if(missing&&!confirm(missing+' answers have no rating yet. Download anyway?')){return;}
  var blob=new Blob([lines.join('\\n')+'\\n'],{type:'text/csv'});
  var a=document.createElement('a');a.href=URL.createObjectURL(blob);
  a.download='ratings-'+rater.replace(/[^A-Za-z0-9_-]+/g,'-')+'.csv';a.click();}
"""
SHEET_CSS = """
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:960px;color:#222;padding:0 1em}
.item{border:1px solid #ccc;border-radius:6px;padding:0.8em;margin:1em 0}
.answer{white-space:pre-wrap;background:#f7f7f7;padding:0.5em;font-family:ui-monospace,monospace}
label{margin-right:1em} textarea{width:100%;height:2.5em} .muted{color:#777}
"""


def filled_rows(path: Path, checks: Mapping[str, str], unknown: str,
                mismatch: str) -> Iterator[tuple[str, str, str]]:
    """(where, item id, rating text) per row of a filled-in sheet, its id known and its answer
    check (item id -> check) matching; a blank rating comes through as ''. ``unknown`` and
    ``mismatch`` (formatted with ``item_id``) finish the error messages."""
    reader = csv_reader(path, "ratings file")
    try:
        missing = [c for c in ("item_id", "rating") if c not in (reader.fieldnames or [])]
        if missing:
            raise DataError(f"{path}: no {' / '.join(missing)} column (export a sheet first)")
        for row in reader:
            where = f"{path}, row {reader.line_num}"
            item_id = csv_uncell((row.get("item_id") or "").strip())
            if item_id not in checks:
                raise DataError(f"{where}: item_id '{item_id}' is not {unknown}")
            check = (row.get("answer_check") or "").strip()
            if check and check != checks[item_id]:
                raise DataError(f"{where}: answer_check {check} does not match "
                                + mismatch.format(item_id=item_id))
            yield where, item_id, csv_uncell((row.get("rating") or "").strip())
    except csv.Error as exc:
        raise DataError(f"{path}, row {reader.line_num}: malformed CSV ({exc})") from None
