%% @doc The group of copies of a replica group and its changes under DottedDB replication
%% (*DottedDB: Anti-Entropy without Merkle Trees, Deletes without Tombstones*, §IV: node ids
%% in node clocks and contexts): copies replaced by new ids, incarnations, retired ids, and
%% the handoff that bootstraps a new copy. Part of the per-copy core ({@link hm_dotted});
%% pure over its state (`hm_dotted.hrl'). The narrative is {@link hm_dotted}'s, sections
%% "Churn" and "Incarnations".
%%
%% <ul>
%% <li>Ids by address: an address of the group stands for the id known there, or for the
%% placeholder `{Address, 0}' until a copy is heard from; a higher incarnation heard of at
%% an address supersedes the id known there, which is retired (a placeholder just goes).</li>
%% <li>Retired ids: a retired id waits for the copies of the group (following each to its
%% newest incarnation) to show, in an exchange, that they hold no dot of it this copy lacks;
%% it is then closed, and strip (hm_dotted_store) drops its entries. A context naming an id
%% neither in the group nor retired retires it the same way; an id back in the group is live
%% again.</li>
%% <li>Handoff: a bootstrapping copy is `syncing' and asks a random other copy for its whole
%% state, again after 2, 4, 8 and at most 16 anti-entropy ticks; a copy asked that is
%% syncing itself refuses, and the asking copy asks another one at once.</li>
%% </ul>
%%
%% Invariants: the group always holds this copy's own id; a retired id is closed only once
%% every copy it waits for has shown that it holds no dot of it this copy lacks; a copy that
%% is syncing never hands off its state (it refuses).
-module(hm_dotted_churn).
-include("hm_dotted.hrl").

-export([to_ids/3, set_ids/2, learn/2, retire_unknown/2, confirm_retired/4]).
-export([others/1, random_of/2]).
-export([ask_handoff/1, handoff_tick/1, transfer_req/2, transfer_refused/2]).

%% a copy waiting for its handoff asks again after 2, 4, 8... anti-entropy ticks, at most
-define(MAX_ASK_GAP, 16).

%%% ================================================================ the group

%% The other copies of the group.
-spec others(#d{}) -> [hm_dotted:id()].
others(#d{id = Id, peers = Ps}) -> Ps -- [Id].

%% One of `Ps', drawn from the copy's random state (option `seed').
-spec random_of([hm_dotted:id(), ...], #d{}) -> {hm_dotted:id(), #d{}}.
random_of(Ps, S = #d{rand = R}) ->
    {I, R1} = rand:uniform_s(length(Ps), R),
    {lists:nth(I, Ps), S#d{rand = R1}}.

%% The ids of the copies at `Addrs': an id as it is; an address, the id of the copy known
%% there, or (none known) its placeholder: the address itself when this copy's id has no
%% incarnation, else `{Address, 0}', superseded by the first id heard from there.
-spec to_ids([hm_dotted:id() | hm_dotted:address()], hm_dotted:id(), [hm_dotted:id()]) ->
          [hm_dotted:id()].
to_ids(Addrs, Id, Peers) ->
    Known = by_address(Peers),
    [case {is_incarnation(A), Known} of
         {true, _} -> A;
         {false, #{A := P}} -> P;
         {false, _} -> case is_incarnation(Id) of
                           true -> {A, 0};
                           false -> A
                       end
     end || A <- Addrs].

%% Newer incarnations among `Ids' of copies of the group supersede the ids known here: the
%% old id is retired as a replaced copy's is (a placeholder just goes: it made no dot).
%% (Called on every message and every store: ids of the group, the usual case, cost a
%% membership test each.)
-spec learn([hm_dotted:id()], #d{}) -> #d{}.
learn(Ids, S = #d{id = Me, peers = Peers}) ->
    case [Id || Id <- Ids, is_incarnation(Id), not lists:member(Id, Peers)] of
        [] -> S;
        Others ->
            Known = by_address(Peers),
            %% the highest incarnation named per address (usort: ascending, the last wins)
            Newest = by_address(lists:usort(Others)),
            New = [Id || {A, Id} <- maps:to_list(Newest), A =/= hm_dotted:address(Me),
                         #{A := P} <- [Known],
                         hm_dotted:incarnation(P) < hm_dotted:incarnation(Id)],
            case New of
                [] -> S;
                _ ->
                    Gone = [maps:get(hm_dotted:address(Id), Known) || Id <- New],
                    set_ids((Peers -- Gone) ++ New, S)
            end
    end.

%% Ids by address (the last of a list wins).
by_address(Ids) -> maps:from_list([{hm_dotted:address(Id), Id} || Id <- Ids]).

is_incarnation({_, I}) -> is_integer(I);
is_incarnation(_) -> false.

is_placeholder({_, 0}) -> true;
is_placeholder(_) -> false.

%% The group is now `Peers0' (ids) and this copy: the ids gone are retired, those back in
%% the group live again.
-spec set_ids([hm_dotted:id()], #d{}) -> #d{}.
set_ids(Peers0, S = #d{id = Id, peers = Old, wm = WM, retired = Ret}) ->
    Peers = lists:usort([Id | Peers0]),
    Gone = [G || G <- Old -- Peers, not is_placeholder(G)],
    %% a retired id waits for the copies of the group: for the copy now at the address of
    %% one it waited for (a newer incarnation, which may hold what a handoff gave it), and
    %% no longer for one that left
    At = by_address(Peers),
    Now = fun(P) -> case lists:member(P, Peers) of
                        true -> [P];
                        false -> case maps:find(hm_dotted:address(P), At) of
                                     {ok, Q} when Q =/= Id ->
                                         [Q || hm_dotted:incarnation(Q) > hm_dotted:incarnation(P)];
                                     _ -> []
                                 end
                    end
          end,
    Ret1 = lists:foldl(fun(G, Acc) -> Acc#{G => Peers -- [Id]} end,
                       maps:map(fun(_, Ps) -> lists:usort(lists:flatmap(Now, Ps)) end, Ret),
                       Gone),
    %% an id back in the group (a node that left the group and holds a copy again, its dots
    %% continuing after its old ones) is a live id again, not a retired one
    S1 = S#d{peers = Peers, wm = maps:with(Peers, WM), retired = maps:without(Peers, Ret1),
             closed = S#d.closed -- Peers, heard = maps:with(Peers, S#d.heard)},
    hm_dotted_sync:gc_dot_keys(close_retired(S1)).

%% A context naming an id that is not in the group and was never retired here (a copy that
%% joined after it left learns of it so): retired like the others.
-spec retire_unknown(hm_node_clock:clock(), #d{}) -> #d{}.
retire_unknown(CC, S0) ->
    %% a newer incarnation of a copy of the group is learnt, not retired
    S = #d{peers = Peers, retired = Ret, closed = Closed} = learn(hm_node_clock:replicas(CC), S0),
    case [R || R <- hm_node_clock:replicas(CC), not lists:member(R, Peers),
               not maps:is_key(R, Ret), not lists:member(R, Closed)] of
        [] -> S;
        New -> close_retired(S#d{retired = maps:merge(Ret, maps:from_list(
                                                             [{R, others(S)} || R <- New]))})
    end.

%% What the node clock `NCp' of copy `P' (whose group is `PPeers') shows of the retired
%% ids: `P' is no longer waited for by those it holds no dot of that this copy lacks.
-spec confirm_retired(hm_dotted:id(), [hm_dotted:id()], hm_node_clock:clock(), #d{}) -> #d{}.
confirm_retired(P, PPeers, NCp, S = #d{retired = Ret, nc = NC}) ->
    Ret1 = maps:map(fun(Old, Waiting) ->
                            case lists:member(P, Waiting) andalso not lists:member(Old, PPeers)
                                andalso entry_leq(Old, NCp, NC) of
                                true -> Waiting -- [P];
                                false -> Waiting
                            end
                    end, Ret),
    close_retired(S#d{retired = Ret1}).

close_retired(S = #d{retired = Ret}) ->
    Done = [Old || {Old, []} <- maps:to_list(Ret)],
    S#d{retired = maps:without(Done, Ret), closed = lists:usort(Done ++ S#d.closed)}.

%% every dot of id `R' in `A' is in `B'
entry_leq(R, A, B) ->
    hm_node_clock:max_counter(R, A) =< hm_node_clock:base(R, B) orelse
        lists:all(fun(D) -> hm_node_clock:contains(D, B) end,
                  [{R, C} || C <- lists:seq(hm_node_clock:base(R, B) + 1,
                                            max(hm_node_clock:base(R, B),
                                                hm_node_clock:base(R, A)))]
                  ++ entry_dots(R, A)).

%% the dots of id `R' above its base (the entry's bitmap)
entry_dots(R, NC) ->
    [{R, C} || C <- lists:seq(hm_node_clock:base(R, NC) + 1, hm_node_clock:max_counter(R, NC)),
               hm_node_clock:contains({R, C}, NC)].

%%% ================================================================ handoff

%% A handoff is asked of a random other copy, among those that have not refused since the
%% last timed ask.
-spec ask_handoff(#d{}) -> {#d{}, effects()}.
ask_handoff(S = #d{refused = Refused}) ->
    case others(S) of
        [] -> {S#d{ready = true}, []};
        Os ->
            {P, S1} = random_of(case Os -- Refused of [] -> Os; Left -> Left end, S),
            {S1, [{send, P, {transfer_req, S1#d.id}}]}
    end.

%% The anti-entropy tick of a copy waiting for its handoff: a handoff is the whole state:
%% asking every tick would have peers send it again and again while the first is still on
%% its way or being merged; the gap doubles. The caller re-arms the timer.
-spec handoff_tick(#d{}) -> {#d{}, effects()}.
handoff_tick(S = #d{waited = W, ask_gap = G}) when W + 1 < G ->
    {S#d{waited = W + 1}, []};
handoff_tick(S = #d{ask_gap = G}) ->
    ask_handoff(S#d{waited = 0, ask_gap = min(2 * G, ?MAX_ASK_GAP), refused = []}).

%% A copy asks for a handoff (`transfer_req'; a peer's `sync_clock' showing that it lost its
%% state is answered the same way, hm_dotted_sync:sync_clock/4).
-spec transfer_req(hm_dotted:id(), #d{}) -> {#d{}, effects()}.
transfer_req(From, S = #d{ready = true, st = St}) ->
    %% a handoff: every object, the node clock and the dot-key map (the new copy must be
    %% able to answer for the dots it takes on)
    {S, [{send, From, {sync_repair, S#d.id, S#d.peers, S#d.nc, maps:to_list(St),
                       {full, maps:to_list(S#d.dkm)}}}]};
transfer_req(From, S) ->
    %% not caught up itself: the asking copy asks another one
    {S, [{send, From, {transfer_refused, S#d.id}}]}.

%% The copy asked for a handoff refused (`transfer_refused').
-spec transfer_refused(hm_dotted:id(), #d{}) -> {#d{}, effects()}.
transfer_refused(From, S = #d{ready = false, refused = Refused0, ask_gap = G}) ->
    %% the copy asked waits for its handoff too (the copies of a table just created start
    %% one after another): ask another one now, or, when every other copy refused, at the
    %% next anti-entropy tick. Waiting out the gap instead kept a copy syncing, refusing
    %% reads and writes, for up to 30 ticks.
    Refused = lists:usort([From | Refused0]),
    case others(S) -- Refused of
        [] -> {S#d{refused = [], waited = G - 1}, []};
        _ -> ask_handoff(S#d{refused = Refused})
    end;
transfer_refused(_From, S) ->
    {S, []}.
