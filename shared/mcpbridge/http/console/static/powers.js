// What the signed-in key may change, as the REST API decides it (role and capabilities), to offer only the forms
// that can work. The REST API checks every request again and has the last word.

function may(session, capability) {
  const caps = session.capabilities;
  return session.role === "admin" && (caps === null || caps.includes(capability));
}

export const managesEndpoints = (session) => may(session, "manage_channels");
export const managesServices = (session) => may(session, "manage_services");
export const managesUsers = (session) => may(session, "manage_users");
export const managesKeys = (session) => may(session, "manage_keys");
export const managesKnowledge = (session) => may(session, "manage_knowledge");
export const writesDocuments = (session) => may(session, "write");
/** Creating a knowledge base also needs a key not limited to some of them. */
export const createsKnowledgeBases = (session) => may(session, "manage_knowledge") && session.knowledge_base_ids === null;
