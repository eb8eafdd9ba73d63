// Reading everything again every few seconds, and wiring the page's
// controls once it is loaded.

// === refresh ===

function handle(error) {
  if (error instanceof ApiError && error.status === 401) {
    signOut("That admin key was refused: sign in again.");
    return;
  }
  showError(error);
}

async function refresh() {
  if (adminKey() === null) return;
  if (state.refreshing) {
    state.again = true;
    return;
  }
  state.refreshing = true;
  state.again = false;
  try {
    await Promise.all([
      loadKeys(),
      loadOpenCustomers(),
      loadOrgs(Math.max(state.orgs.length, PAGE_SIZE)).then(renderOrgs),
      loadHolds(),
      loadSpend(),
    ]);
    $("status").textContent = `updated ${new Date().toLocaleTimeString()}`;
    $("status").classList.remove("stale");
  } catch (error) {
    if (error instanceof ApiError && error.status === 401) {
      handle(error);
    } else {
      // Keep what is shown; say it is old and why.
      $("status").textContent = `not updated: ${error.message}`;
      $("status").classList.add("stale");
    }
  } finally {
    state.refreshing = false;
  }
  if (state.again) {
    await refresh();
  }
}

// === wiring ===

function wire() {
  $("sign-in-form").addEventListener("submit", signIn);
  $("sign-out").addEventListener("click", () => signOut(""));
  $("create-key-form").addEventListener("submit", createKey);
  $("key-search").addEventListener("input", searchSoon);
  $("keys-more").addEventListener("click", moreKeys);
  $("orgs-more").addEventListener("click", moreOrgs);
  $("secret-copy").addEventListener("click", copySecret);
  $("secret-dismiss").addEventListener("click", hideSecret);
  $("dialog-form").addEventListener("submit", dialogSubmit);
  $("dialog-cancel").addEventListener("click", () => $("dialog").close());
  if (adminKey() !== null) {
    start();
  }
}

document.addEventListener("DOMContentLoaded", wire);
