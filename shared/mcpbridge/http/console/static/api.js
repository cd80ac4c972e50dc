// Requests to mcpbridge's REST API with the console's session cookie. Changes carry the session's CSRF token;
// errors become ApiError with the problem's code and detail (application/problem+json).

const SESSION = "/console/session";
const SAFE = new Set(["GET", "HEAD"]);
let csrfToken = null;

export class ApiError extends Error {
  constructor(status, problem) {
    super(problem.detail || `the server answered ${status}`);
    this.status = status;
    this.code = problem.code || "";
    this.details = problem.details || null;
    this.errors = Array.isArray(problem.errors) ? problem.errors : []; // a 422's fields
  }
}

export function signInUrl() {
  const back = location.pathname + location.search;
  return `/console/signin?next=${encodeURIComponent(back)}`;
}

export async function api(method, path, body) {
  const headers = { Accept: "application/json" };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  if (!SAFE.has(method) && csrfToken) headers["X-CSRF-Token"] = csrfToken;
  const response = await fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    credentials: "same-origin",
    cache: "no-store",
  });
  const text = response.status === 204 ? "" : await response.text();
  let data = null;
  if (text) {
    try {
      data = JSON.parse(text);
    } catch {
      data = { detail: text.slice(0, 300) };
    }
  }
  if (!response.ok) {
    if (response.status === 401 && path !== SESSION) location.assign(signInUrl());
    throw new ApiError(response.status, data || {});
  }
  return data;
}

/** Who is signed in (and the CSRF token for changes); a browser without a session goes to the sign-in page. */
export async function loadSession() {
  try {
    const session = await api("GET", SESSION);
    csrfToken = session.csrf_token;
    return session;
  } catch (error) {
    if (error.status === 401) {
      location.assign(signInUrl());
      return new Promise(() => {}); // the page is leaving
    }
    throw error;
  }
}

export async function signIn(apiKey) {
  const session = await api("POST", SESSION, { api_key: apiKey });
  csrfToken = session.csrf_token;
  return session;
}

export async function signOut() {
  await api("DELETE", SESSION);
  csrfToken = null;
}

/** A file (or any form) posted as multipart/form-data, with the upload's progress reported as it goes (fetch
 * cannot tell it); the answer as ``api`` gives it. */
export function upload(path, form, onProgress) {
  return new Promise((resolve, reject) => {
    const request = new XMLHttpRequest();
    request.open("POST", path);
    request.setRequestHeader("Accept", "application/json");
    if (csrfToken) request.setRequestHeader("X-CSRF-Token", csrfToken);
    request.upload.addEventListener("progress", (event) => {
      if (event.lengthComputable) onProgress(event.loaded, event.total);
    });
    request.addEventListener("load", () => {
      let data = {};
      try {
        data = request.responseText ? JSON.parse(request.responseText) : {};
      } catch {
        data = { detail: request.responseText.slice(0, 300) };
      }
      if (request.status >= 200 && request.status < 300) resolve(data);
      else reject(new ApiError(request.status, data));
    });
    request.addEventListener("error", () => reject(new ApiError(0, { detail: "the upload could not reach the server" })));
    request.send(form);
  });
}
