%% @doc A `sync_ec' delete kept as a hint is not acknowledged: a hint is issued when it is
%% handed off, with the causal context of the holder that takes it then, so it may remove
%% writes made elsewhere after the caller was answered. Were it answered `ok', a write issued
%% after that answer, which the delete cannot have seen, would be removed under add-wins.
%%
%% The path, driven on the runtime's own pure modules (the per-table core {@link
%% hm_ec_table} on a map store, and {@link hm_ec_hints:pass_on/4}, the order in which
%% {@link hm_ec_server} hands a node's writes to holders):
%% <ol>
%% <li>node 2 restarts; before its table's process is taken up, a write of its client is
%% passed to node 3's copy, which takes it: node 2's session on the table now holds that
%% write's dot;</li>
%% <li>node 2's copy is ready but has not delivered that dot (it is cut off from node 3):
%% it refuses the client's `sync_ec' delete (`{behind, Tab}'), node 3 is unreachable, so the
%% delete is kept as a hint ({@link hm_ec_hints:kept_answer/2} says what the caller is
%% answered);</li>
%% <li>node 3's client writes W;</li>
%% <li>the cut heals, node 2 delivers node 3's operations (W among them) and hands the hint
%% off: the delete is issued only now, with a vector that covers W, and W is removed on
%% every copy.</li>
%% </ol>
-module(hm_hinted_delete_tests).
-include_lib("eunit/include/eunit.hrl").

copy(Node) ->
    {T, _} = hm_ec_table:new(#{tab => t, type => pawset, policy => term_order,
                               record => {t, 3}, cookie => c, node => Node, incarnation => 1,
                               members => [Node], store => hm_ec_store_map:new(set, ram)}),
    hm_ec_table:set_members([n2, n3], T).

%% The operations a step sent to member `To'.
sent(To, Effs) -> [M || {send, N, {op, M}} <- Effs, N =:= To]
                      ++ lists:append([Ms || {send, N, {ops, Ms}} <- Effs, N =:= To]).

deliver(From, Msgs, T) -> element(1, hm_ec_table:handle(From, c, {ops, Msgs}, T)).

replies(Effs) -> [R || {reply, _, R} <- Effs].

a_sync_delete_kept_as_a_hint_is_not_acknowledged_test() ->
    C2a = copy(n2),
    C3a = copy(n3),
    %% 1. node 2's table process is not up yet: its client's write goes to node 3's copy,
    %%    which takes it; node 2's session holds its dot
    {C3b, E1} = hm_ec_table:submit_after(#{}, {j, {write, {t, j, 1}}}, sync, from, {0, []}, C3a),
    [{ok, DotJ}] = replies(E1),
    Session = hm_ec_hints:session_add(DotJ, #{}),
    %% 2. node 2's copy runs, cut off from node 3 and behind node 2's session: a sync_ec
    %%    delete of k is refused there, node 3 is unreachable, and it is kept as a hint
    Try = fun(KeyOp, Copy) ->
                  {Copy1, E} = hm_ec_table:submit_after(Session, KeyOp, sync, from, {0, []}, Copy),
                  case replies(E) of
                      [{error, {behind, t}}] -> {unreachable, Copy1};  % and node 3 cut off
                      [{ok, _}] -> {ok, {Copy1, E}}
                  end
          end,
    {[], Kept, C2b} = hm_ec_hints:pass_on([], {k, delete}, Try, C2a),
    ?assertEqual(kept, Kept),
    %% what hm_ec_server:handoff/3 answers the sync_ec caller
    Answer = hm_ec_hints:kept_answer(t, sync),
    DeleteAcked = erlang:monotonic_time(),
    %% 3. node 3's client writes W on k, after the delete's caller was answered
    WIssued = erlang:monotonic_time(),
    ?assert(DeleteAcked < WIssued),
    {C3c, E3} = hm_ec_table:submit({k, {write, {t, k, w}}}, sync, from, {0, []}, C3b),
    ?assertEqual([ok], replies(E3)),
    ?assertEqual([{t, k, w}], hm_ec_table:read(k, C3c)),
    %% 4. the heal: node 2 delivers node 3's operations, then hands its hint off (to its own
    %%    copy first, which now covers the session)
    C2c = deliver(n3, sent(n2, E1) ++ sent(n2, E3), C2b),
    ?assertEqual([{t, k, w}], hm_ec_table:read(k, C2c)),
    Handoff = fun(KeyOp, Copy) ->
                      {Copy1, E} = hm_ec_table:submit_after(Session, KeyOp, async, from, {0, []},
                                                            Copy),
                      [{ok, _}] = replies(E),
                      {ok, {Copy1, E}}
              end,
    {[1], none, {C2d, E4}} = hm_ec_hints:pass_on([{1, {k, delete}}], none, Handoff, C2c),
    C3d = deliver(n2, sent(n3, E4), C3c),
    %% both copies agree ...
    ?assertEqual(hm_ec_table:read(k, C2d), hm_ec_table:read(k, C3d)),
    %% ... and either the delete was not acknowledged, or W, issued after it was, survives it
    %% (add-wins)
    case Answer of
        ok -> ?assertEqual([{t, k, w}], hm_ec_table:read(k, C3d));
        _ -> ?assertEqual({error, {hinted, t}}, Answer)
    end.

%% An async_ec write kept as a hint is answered `ok' (accepted: it takes effect when handed
%% off, docs/limits.md).
an_async_write_kept_as_a_hint_is_answered_ok_test() ->
    ?assertEqual(ok, hm_ec_hints:kept_answer(t, async)).
