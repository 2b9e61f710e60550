"""The frame every HTML page of the reports shares (report.html, and the release audit's
compare.html / audit.html): one stylesheet, the few lines of script that sort tables, and the
document around a page's body, with a Content-Security-Policy that fetches nothing and allows only
this script, by its hash. The pages' parts are ``html_parts.py``; their bodies ``html.py`` (the
run report), ``answer_html.py`` (its first screen and evidence) and ``audit_html.py``.
"""
from __future__ import annotations

import base64
import hashlib

from .html_parts import esc

#: a click on a header of a ``table.sortable`` sorts it by that column (``data-sort`` when set)
SORT_SCRIPT = """(function(){
function key(c){var v=c.getAttribute('data-sort');if(v===null){return c.textContent.trim().toLowerCase();}var n=parseFloat(v);return isNaN(n)?-Infinity:n;}
document.querySelectorAll('table.sortable th').forEach(function(th){th.addEventListener('click',function(){
var tr=th.parentNode,t=th.closest('table'),b=t.tBodies[0],i=Array.prototype.indexOf.call(tr.children,th);
var asc=th.getAttribute('aria-sort')!=='ascending';
Array.prototype.forEach.call(tr.children,function(h){h.removeAttribute('aria-sort');});
th.setAttribute('aria-sort',asc?'ascending':'descending');
var rows=Array.prototype.slice.call(b.rows);
rows.sort(function(r,s){var x=key(r.cells[i]),y=key(s.cells[i]);return (x<y?-1:x>y?1:0)*(asc?1:-1);});
rows.forEach(function(r){b.appendChild(r);});});});
})();"""

#: every page's base: type, headings, tables, figures, notes
STYLE = """
:root{--ink:#1d2430;--muted:#5b6472;--line:#d9dee6;--bg:#ffffff;--soft:#f5f7fa;--accent:#1f5fa8;--bad:#b42318;--good:#1a7f37}
*{box-sizing:border-box}
body{margin:0;background:var(--bg);color:var(--ink);font:15px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif}
main{max-width:1320px;margin:0 auto;padding:24px 24px 64px}
h1{font-size:1.7em;margin:0 0 4px}
h2{font-size:1.35em;margin:40px 0 8px;padding-top:8px;border-top:2px solid var(--line)}
h3{font-size:1.1em;margin:28px 0 6px}
p.lead,p.explain{color:var(--muted);max-width:900px}
p.meta{color:var(--muted);margin:0 0 16px;font-size:.9em}
nav.toc{background:var(--soft);border:1px solid var(--line);border-radius:6px;padding:10px 18px;margin:16px 0}
nav.toc ol{margin:4px 0;padding-left:22px}
nav.toc ol ol{font-size:.92em}
dl.facts{display:grid;grid-template-columns:max-content 1fr;gap:2px 18px;margin:8px 0 16px}
dl.facts dt{font-weight:600;color:var(--muted)}
dl.facts dd{margin:0;word-break:break-word}
ul.findings li{margin:4px 0}
.table-wrap{overflow-x:auto;margin:8px 0 16px}
table{border-collapse:collapse;font-size:.84em;min-width:50%}
th,td{border-bottom:1px solid var(--line);padding:4px 7px;text-align:left;vertical-align:top}
th{background:var(--soft);position:sticky;top:0;font-weight:600}
td{max-width:320px;overflow-wrap:break-word}
details{margin:0 0 14px}
summary{cursor:pointer;color:var(--accent)}
table.sortable th{cursor:pointer;user-select:none}
table.sortable th::after{content:"\\00a0\\2195";color:#a0a8b4;font-size:.8em}
table.sortable th[aria-sort=ascending]::after{content:"\\00a0\\25B2";color:var(--accent)}
table.sortable th[aria-sort=descending]::after{content:"\\00a0\\25BC";color:var(--accent)}
td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
td.evidence,td.cause,td.params{max-width:560px;word-break:break-word}
tbody tr:nth-child(even){background:#fafbfc}
.flagged{color:var(--bad);font-weight:600}
.trusted{color:var(--good);font-weight:600}
figure{margin:12px 0 24px}
figure svg{max-width:100%;height:auto;display:block}
figcaption{color:var(--muted);font-size:.88em;max-width:900px;margin-top:4px}
.note{background:#fff8e6;border-left:4px solid #e0a800;padding:6px 12px;margin:8px 0}
code{background:var(--soft);padding:0 3px;border-radius:3px}
"""

#: the first screen, the side bar of contents, the evidence blocks, the audit's lists of changes
ANSWER_STYLE = """
aside.side{position:fixed;top:0;left:0;bottom:0;width:230px;overflow-y:auto;background:var(--soft);border-right:1px solid var(--line);padding:12px 10px;font-size:.8em}
aside.side nav.toc{background:none;border:0;padding:0;margin:0}
aside.side ol{padding-left:16px}
body.with-side main{margin-left:230px;max-width:1220px}
@media (max-width:1000px){aside.side{position:static;width:auto;border-right:0}body.with-side main{margin-left:0}}
header.top h1{font-size:1.35em;margin:0}
p.ran{margin:2px 0 8px;font-size:.9em}
section#answer h2{border-top:0;margin:6px 0 2px;padding-top:0;font-size:1.15em}
p.key{color:var(--muted);font-size:.8em;margin:0 0 4px}
.answer-grid{display:grid;grid-template-columns:minmax(0,1fr);gap:4px 18px;align-items:start}
@media (min-width:1700px){body.with-side main{max-width:none}.answer-grid{grid-template-columns:minmax(0,1fr) minmax(0,1fr)}}
table.answer{table-layout:fixed;width:100%;font-size:.78em;line-height:1.3;min-width:0;margin:0}
table.answer caption{text-align:left;font-weight:600;padding:0 4px 1px;color:var(--muted)}
table.answer th,table.answer td{padding:1px 4px;max-width:none;white-space:nowrap;vertical-align:top}
table.answer td.pick,table.answer td.nb,table.answer th.fam,table.answer thead th{white-space:normal;overflow-wrap:anywhere}
table.answer tbody{border-top:1px solid var(--line)}
table.answer tbody tr{background:none}table.answer tbody:nth-of-type(even){background:#fafbfc}
table.answer col.fam{width:13.5em}table.answer col.ver{width:8em}table.answer col.xi{width:10.6em}table.answer col.nb{width:13em}table.answer col.fl{width:3em}
table.answer a{color:inherit;text-decoration:none}table.answer a:hover{text-decoration:underline}
table.answer .fam a.badge{margin-left:2px}
.v{display:inline-block;padding:0 6px;border-radius:8px;font-size:.92em;font-weight:600;white-space:nowrap}
.v-clear{background:#dcf3e2;color:#135e28}.v-tied{background:#e1ecfa;color:#1f4f8a}.v-inconclusive{background:#fff1cc;color:#7a5600}
.v-only{background:#eceff3;color:#3d4654}.v-none{background:#fbe0de;color:#8c1d13}
.nowrap{white-space:nowrap}
.weak{display:inline-block;padding:0 5px;border-radius:8px;background:#fff1cc;color:#7a5600;font-weight:600;white-space:nowrap}
.ci{color:var(--muted);font-size:.9em}
a.badge{display:inline-block;white-space:nowrap;padding:0 6px;border-radius:8px;background:#fbe0de;color:#8c1d13;font-weight:600;text-decoration:none}
.ev{border-top:1px solid var(--line);padding-top:4px}
.ev:target,.rows:target,tr:target{background:#fffbe6}
.ev figure{display:inline-block;vertical-align:top;margin:6px 12px 6px 0}
.changes{display:grid;grid-template-columns:repeat(3,1fr);gap:0 18px}
.changes>div{max-height:calc(100vh - 190px);overflow-y:auto}
.changes h3{margin:6px 0 4px}
.changes ul{margin:0;padding-left:18px;font-size:.85em}
.changes li{margin:2px 0}
table.plain{font-variant-numeric:tabular-nums}
.rows h4{margin:14px 0 2px}.rows ul{margin:2px 0;font-size:.88em}
"""


def document(title: str, body: str, side: str = "") -> str:
    """The whole HTML document: ``title``, the stylesheet, ``side`` (the side bar, or none), ``body``
    and the sort script."""
    script_hash = base64.b64encode(hashlib.sha256(SORT_SCRIPT.encode()).digest()).decode()
    csp = (f"default-src 'none'; style-src 'unsafe-inline'; img-src data:; "
           f"script-src 'sha256-{script_hash}'; base-uri 'none'; form-action 'none'")
    return ("<!DOCTYPE html>\n"
            f'<html lang="en"><head><meta charset="utf-8">'
            f'<meta http-equiv="Content-Security-Policy" content="{esc(csp)}">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{esc(title)}</title><style>{STYLE}{ANSWER_STYLE}</style></head>"
            f"<body{' class=' + chr(34) + 'with-side' + chr(34) if side else ''}>{side}<main>"
            + body + f"<script>{SORT_SCRIPT}</script></main></body></html>\n")
