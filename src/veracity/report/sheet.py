"""Rating sheets handed to people (γ's answers, FEWL's answer pairs): the page's script and
style, and the check that ties a rating to the exact text that was rated."""

from __future__ import annotations

import hashlib


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
