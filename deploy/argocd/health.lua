-- Argo CD health of a custom resource ruleop serves (and of a Rule), from the conditions
-- ruleop writes: Degraded while `Stalled` is True (it failed and needs someone to act),
-- Progressing while `Reconciling` is True or ruleop has not seen the latest generation,
-- Healthy once `Ready` is True. Install: see the README ("GitOps health").
local hs = { status = "Progressing", message = "waiting for ruleop" }
if obj.status == nil or obj.status.conditions == nil then
  return hs
end
local generation = obj.metadata.generation
local function current(c)
  return c.observedGeneration == nil or generation == nil or c.observedGeneration == generation
end
if obj.status.observedGeneration ~= nil and generation ~= nil and obj.status.observedGeneration ~= generation then
  hs.message = "ruleop has not seen generation " .. generation .. " yet"
  return hs
end
local by = {}
for _, c in ipairs(obj.status.conditions) do
  by[c.type] = c
end
local function said(c)
  local m = c.reason or ""
  if c.message ~= nil and c.message ~= "" then
    m = m .. ": " .. c.message
  end
  return m
end
local stalled = by["Stalled"]
if stalled ~= nil and stalled.status == "True" and current(stalled) then
  hs.status = "Degraded"
  hs.message = said(stalled)
  return hs
end
local reconciling = by["Reconciling"]
if reconciling ~= nil and reconciling.status == "True" then
  hs.message = said(reconciling)
  return hs
end
local ready = by["Ready"]
if ready ~= nil and ready.status == "True" and current(ready) then
  hs.status = "Healthy"
  hs.message = ready.message or ""
  return hs
end
if ready ~= nil then
  hs.message = said(ready)
end
return hs
