// Building the page from data: text only ever goes in as text (no HTML parsing of anything the API returns).

export function h(tag, attributes = {}, ...children) {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value === false || value === null || value === undefined) continue;
    if (name === "class") element.className = value;
    else if (name.startsWith("on")) element.addEventListener(name.slice(2), value);
    else element.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    element.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return element;
}

export function pretty(value) {
  return JSON.stringify(value, null, 2);
}

function spoken(seconds) {
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
  return `${Math.floor(s / 86400)} d ${Math.floor((s % 86400) / 3600)} h`;
}

export function age(iso) {
  return `${spoken((Date.now() - Date.parse(iso)) / 1000)} ago`;
}

export function remaining(iso) {
  const seconds = (Date.parse(iso) - Date.now()) / 1000;
  return seconds <= 0 ? "now" : `in ${spoken(seconds)}`;
}

export function when(iso) {
  if (!iso) return "";
  const date = new Date(iso);
  return Number.isNaN(date.getTime()) ? iso : date.toLocaleString();
}

export function show(element, message) {
  element.textContent = message || "";
}

export function size(bytes) {
  if (bytes < 1024) return `${bytes} B`;
  if (bytes < 1024 * 1024) return `${(bytes / 1024).toFixed(1)} KB`;
  return `${(bytes / 1024 / 1024).toFixed(1)} MB`;
}

/** A field's error shown under it and announced, the field marked invalid (or both cleared with no message). */
export function fieldError(field, element, message) {
  element.textContent = message || "";
  if (field) field.setAttribute("aria-invalid", message ? "true" : "false");
  if (field && message) field.focus();
}

/** The problem an ApiError carries, with the fields a 422 names. */
export function problemText(error) {
  const named = (error.errors || []).map((each) => `${(each.loc || []).filter((part) => part !== "body").join(".")}: ${each.msg}`);
  return [error.message, ...named].join(" ");
}

async function copied(text) {
  try {
    await navigator.clipboard.writeText(text);
    return true;
  } catch {
    // without the clipboard API (an insecure origin): copy from a selected hidden field
    const field = h("textarea", { class: "visually-hidden", "aria-hidden": "true", tabindex: "-1" }, text);
    document.body.append(field);
    field.select();
    const done = document.execCommand("copy");
    field.remove();
    return done;
  }
}

/** A block of text to copy (a config, a token) with its own copy button that says when it is copied. */
export function copyBlock(label, text, id) {
  const said = h("span", { class: "copied", id: `${id}-status`, role: "status" });
  const block = h("pre", { class: "json", id, tabindex: "0", "aria-label": label }, text);
  const button = h(
    "button",
    {
      type: "button",
      "data-copy": id,
      onclick: async () => {
        said.textContent = (await copied(text)) ? "Copied." : "Select the text and copy it.";
      },
    },
    `Copy ${label}`,
  );
  return h("div", { class: "copy-block" }, h("h3", {}, label), block, h("div", { class: "actions" }, button, said));
}

/** A button for what cannot be undone: the first press asks (the label changes), the second does it; leaving the
 * button (blur) disarms it. No dialog: a person sees and hears the question where the button is. */
export function confirmButton(label, question, attributes, action) {
  const button = h("button", { type: "button", ...attributes }, label);
  button.addEventListener("click", async () => {
    if (button.dataset.armed !== "true") {
      button.dataset.armed = "true";
      button.textContent = question;
      button.classList.add("danger");
      return;
    }
    button.disabled = true;
    try {
      await action();
    } finally {
      button.disabled = false;
      disarm();
    }
  });
  function disarm() {
    button.dataset.armed = "false";
    button.textContent = label;
    button.classList.remove("danger");
  }
  button.addEventListener("blur", disarm);
  return button;
}
