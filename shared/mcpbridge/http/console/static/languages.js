// A knowledge base's keyword search languages, as the REST API lists them (GET /api/v1/knowledge/languages: the
// very list its create and update routes check against), as the options of a select.
import { api } from "./api.js";
import { h } from "./dom.js";

const SAID = { auto: "auto (English stems, CJK bigrams)", none: "none (words as written)" };
let listed = null;

/** The select's options, ``current`` chosen; when the list cannot be read, ``current`` alone (nothing to pick). */
export async function fillLanguages(select, current) {
  if (listed === null) {
    try {
      listed = await api("GET", "/api/v1/knowledge/languages");
    } catch {
      listed = { languages: [], default: "auto" };
    }
  }
  const chosen = current || listed.default;
  const names = listed.languages.includes(chosen) ? listed.languages : [chosen, ...listed.languages];
  select.replaceChildren(...names.map((name) => h("option", { value: name }, SAID[name] || name)));
  select.value = chosen;
}
