// A JSON Schema check of the common keywords, so an approver sees mistakes by field before sending; the server
// checks the arguments again with the full validator and has the last word.

function typeOf(value) {
  if (value === null) return "null";
  if (Array.isArray(value)) return "array";
  if (typeof value === "number") return Number.isInteger(value) ? "integer" : "number";
  return typeof value;
}

function fits(type, value) {
  const actual = typeOf(value);
  return actual === type || (type === "number" && actual === "integer");
}

function where(path) {
  return path || "the arguments";
}

export function validate(schema, value, path = "") {
  const errors = [];
  if (!schema || typeof schema !== "object") return errors;
  const say = (message) => errors.push({ path, message: `${where(path)}: ${message}` });
  if (schema.type !== undefined) {
    const types = Array.isArray(schema.type) ? schema.type : [schema.type];
    if (!types.some((type) => fits(type, value))) {
      say(`must be ${types.join(" or ")}, not ${typeOf(value)}`);
      return errors;
    }
  }
  if (schema.enum && !schema.enum.some((option) => JSON.stringify(option) === JSON.stringify(value))) {
    say(`must be one of ${schema.enum.map((option) => JSON.stringify(option)).join(", ")}`);
  }
  if ("const" in schema && JSON.stringify(schema.const) !== JSON.stringify(value)) {
    say(`must be ${JSON.stringify(schema.const)}`);
  }
  if (typeof value === "string") {
    const length = [...value].length;
    if (schema.minLength !== undefined && length < schema.minLength) say(`needs at least ${schema.minLength} characters`);
    if (schema.maxLength !== undefined && length > schema.maxLength) say(`takes at most ${schema.maxLength} characters`);
    if (schema.pattern) {
      try {
        if (!new RegExp(schema.pattern, "u").test(value)) say(`must match ${schema.pattern}`);
      } catch {
        // a pattern this browser cannot read is left to the server
      }
    }
  }
  if (typeof value === "number") {
    if (schema.minimum !== undefined && value < schema.minimum) say(`must be at least ${schema.minimum}`);
    if (schema.maximum !== undefined && value > schema.maximum) say(`must be at most ${schema.maximum}`);
    if (typeof schema.exclusiveMinimum === "number" && value <= schema.exclusiveMinimum) {
      say(`must be more than ${schema.exclusiveMinimum}`);
    }
    if (typeof schema.exclusiveMaximum === "number" && value >= schema.exclusiveMaximum) {
      say(`must be less than ${schema.exclusiveMaximum}`);
    }
  }
  if (Array.isArray(value)) {
    if (schema.minItems !== undefined && value.length < schema.minItems) say(`needs at least ${schema.minItems} items`);
    if (schema.maxItems !== undefined && value.length > schema.maxItems) say(`takes at most ${schema.maxItems} items`);
    if (schema.items && typeof schema.items === "object" && !Array.isArray(schema.items)) {
      value.forEach((item, index) => errors.push(...validate(schema.items, item, `${path}[${index}]`)));
    }
  }
  if (typeOf(value) === "object") {
    const properties = schema.properties || {};
    for (const name of schema.required || []) {
      if (!(name in value)) errors.push({ path: join(path, name), message: `${join(path, name)}: is required` });
    }
    for (const [name, item] of Object.entries(value)) {
      if (name in properties) errors.push(...validate(properties[name], item, join(path, name)));
      else if (schema.additionalProperties === false) {
        errors.push({ path: join(path, name), message: `${join(path, name)}: is not an argument of this tool` });
      } else if (schema.additionalProperties && typeof schema.additionalProperties === "object") {
        errors.push(...validate(schema.additionalProperties, item, join(path, name)));
      }
    }
  }
  return errors;
}

function join(path, name) {
  return path ? `${path}.${name}` : name;
}
