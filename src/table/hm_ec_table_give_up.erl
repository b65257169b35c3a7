%% @doc A bound on what an EC table copy keeps for members it cannot reach. Part of the
%% per-table core ({@link hm_ec_table}); pure.
%%
%% The broadcast log keeps every operation until every member has delivered it
%% ({@link hm_tcsb}): a member that stays unreachable for minutes under load would make
%% every other copy keep every operation made since it left, about 0.5 KB each. Past the
%% bound (the option `log_limit', operations), the log keeps only what a reachable member
%% still lacks ({@link hm_tcsb:give_up/3}); the keys of the operations that left it are
%% kept instead, one entry per key. When a member that lacks some of them is heard from
%% again, this copy sends it its state for those keys (the metadata of its unstable keys,
%% the rows of the keys those operations touched, its delivered vector), as catching up by
%% state does ({@link hm_ec_table_catch_up}), and retransmits nothing to it until it has
%% joined that state. This is the anti-entropy of the DottedDB paper (*DottedDB:
%% Anti-Entropy without Merkle Trees, Deletes without Tombstones*, §IV.G): the keys a node
%% misses, found without a log of the operations.
%%
%% Invariants: stability is unchanged (it still waits for every member), so a key keeps the
%% timestamps of every operation some member lacks, and the join is exact
%% ({@link hm_ec_key:join/2}); the log of such a copy holds at most `log_limit' operations
%% plus what its reachable members lack; only copies that can take a state give up
%% (`ram_copies' tables of records with catching up by state on, see
%% {@link hm_ec_table_catch_up}), and their keys memory grows with the keys written, not with
%% the writes.
-module(hm_ec_table_give_up).
-include("hm_ec_table.hrl").

-export([give_up/1, push_states/2, sent_state/2, sending_to/2, settled/2, is_pushed/1,
         takes_pushed/2]).

%% a member that lacks what this copy gave up is sent its state at most this often (a state
%% of a large table takes seconds to build, send and join: the member says it has it only
%% once it has joined it)
-define(PUSH_RETRY_TICKS, 60).
%% the members that gave up what a member lacks do not all send it their state at once:
%% each waits this many ticks more than the one before it in node order
-define(PUSH_STAGGER_TICKS, 40).
%% ... and both wait this many ticks more per part of the state (a member joins a part in
%% about a tick, and says it has the state only once it joined every part)
-define(PUSH_TICKS_PER_PART, 2).

%% @doc At a tick: past the bound, the operations every member heard from within
%% ?HEARD_TICKS has delivered leave the log, and their keys are kept.
-spec give_up(#t{}) -> #t{}.
give_up(T = #t{log_limit = Limit, tcsb = B, given_up_keys = Keys}) ->
    case gives_up(T) of
        false -> T;
        true ->
            case hm_tcsb:give_up(Limit, ?HEARD_TICKS, B) of
                {[], B1} -> T#t{tcsb = B1};
                {Gone, B1} -> T#t{tcsb = B1, given_up_keys = keys_of(Gone, Keys)}
            end
    end.

%% Only a copy whose members can all take a state: a ready `ram_copies' copy of a table of
%% records with catching up by state on (the server turns it off when any copy is on disc).
gives_up(T = #t{log_limit = Limit}) ->
    Limit =/= infinity andalso hm_ec_table_catch_up:takes_state(T).

keys_of(_, all) -> all;
keys_of([], Keys) -> Keys;
keys_of([{_, _, {_, _, clear}} | _], _) -> all;
keys_of([{_, _, {_, Key, _}} | Rest], Keys) -> keys_of(Rest, Keys#{Key => true}).

%% @doc At a tick: this copy's state to each reachable member (heard from within
%% ?FLOW_SILENT_TICKS) that lacks an operation this copy gave up, with the keys of those
%% operations ({@link hm_ec_table_catch_up:merge_state/2}), at most every ?PUSH_RETRY_TICKS
%% ticks, and not while a state this copy sends it in parts is on its way. After a heal
%% every copy of the other side may owe it a state; one is enough (the member skips the
%% others, see {@link takes_pushed/2}), so of the copies that could send the same
%% (reachable, and holding everything this one gave up) the first in node order sends it
%% at once and each next one ?PUSH_STAGGER_TICKS later, when the member still lacks what
%% that copy gave up (both the stagger and the retry are longer by about the time the
%% member takes to join a state in parts). A member that is silent for a while (it is
%% joining a large state) keeps its place: when it is heard from again the retry waits as
%% before.
-spec push_states([node()], #t{}) -> {#t{}, effects()}.
push_states(Reach, T = #t{tcsb = B}) ->
    case hm_tcsb:given_up(B) of
        G when map_size(G) =:= 0 -> {T, []};
        G ->
            case hm_ec_table_stream:is_ahead(T) of
                true -> {T, []};        % keys ahead of its delivered vector: no state built
                false -> push_states(Reach, G, T)
            end
    end.

push_states(Reach, G, T = #t{tcsb = B, ticks = N, pushed = Pushed0, streams = Streams}) ->
    Self = ?NODE_OF(B),
    Lacking = [M || M <- hm_tcsb:members(B), M =/= Self, hm_tcsb:lacks_given_up(M, B)],
    %% per member lacking: the tick since which it is, and of the last state sent
    Pushed = maps:from_list([{M, maps:get(M, Pushed0, {N, none})} || M <- Lacking]),
    %% the copies that could send the same: reachable, with everything this one
    %% gave up
    Peers = [X || X <- Reach, hm_vv:leq(G, hm_tcsb:reported(X, B))],
    Due = [M || M <- Lacking, lists:member(M, Reach), not is_map_key(M, Streams),
                hm_tcsb:acked_within(M, ?FLOW_SILENT_TICKS, B),
                due(maps:get(M, Pushed), rank(Self, M, Peers), N, join_ticks(T))],
    lists:foldl(fun(M, {Tx = #t{pushed = P}, Effs}) ->
                        case hm_ec_table_catch_up:merge_state(
                               Tx, hm_tcsb:reported(M, B)) of
                            {merge, State} ->
                                Since = element(1, maps:get(M, P)),
                                {Ty, Sends} = hm_ec_table_stream:send_state(
                                                [M], {merge, State#{given_up => G}},
                                                Tx#t{pushed = P#{M := {Since, N}}}),
                                {Ty, Sends ++ Effs};
                            {merge_none} -> {Tx, Effs}
                        end
                end, {T#t{pushed = Pushed}, []}, Due).

%% @doc This copy sent its state to the members `Ms' (they asked for it, or were as far
%% behind as one that did): for those that lack what this copy gave up it counts as pushed,
%% and no other goes to them for ?PUSH_RETRY_TICKS ticks.
-spec sent_state([node()], #t{}) -> #t{}.
sent_state(Ms, T = #t{tcsb = B, ticks = N, pushed = P}) ->
    T#t{pushed = lists:foldl(fun(M, Acc) ->
                                     case hm_tcsb:lacks_given_up(M, B) of
                                         true ->
                                             {Since, _} = maps:get(M, Acc, {N, none}),
                                             Acc#{M => {Since, N}};
                                         false -> Acc
                                     end
                             end, P, Ms)}.

%% @doc Whether this copy is sending member `M' a state in parts, or sent it one because it
%% lacks what this copy gave up no longer ago than it takes to join one: a request of
%% `M' for a state is then answered `merge_none' (the one on its way serves it), not with a
%% second state built while the first is joined.
-spec sending_to(node(), #t{}) -> boolean().
sending_to(M, #t{streams = S}) when is_map_key(M, S) -> true;
sending_to(M, T = #t{pushed = P, ticks = N}) ->
    case P of
        #{M := {_, Last}} when is_integer(Last) -> N - Last < ?PUSH_RETRY_TICKS + join_ticks(T);
        _ -> false
    end.

due({Since, none}, Rank, N, Join) -> N - Since >= Rank * (?PUSH_STAGGER_TICKS + Join);
due({_, Last}, _, N, Join) -> N - Last >= ?PUSH_RETRY_TICKS + Join.

%% About how many ticks a member takes to join the state this copy would send it: a state
%% in parts is joined a part at a time, so the next copy's state (or this copy's again)
%% waits that much longer before it is sent (a large state's join takes longer than the
%% stagger and the retry alone).
join_ticks(#t{part_keys = infinity}) -> 0;
join_ticks(#t{part_keys = P, given_up_keys = all, store = St}) ->
    ?PUSH_TICKS_PER_PART * (hm_ec_store:size(St) div P);
join_ticks(#t{part_keys = P, given_up_keys = Keys}) ->
    ?PUSH_TICKS_PER_PART * (map_size(Keys) div P).

%% This copy's place, in node order, among `Peers' (the copies that could send member `M'
%% the same state).
rank(Self, M, Peers) ->
    length(lists:takewhile(fun(X) -> X =/= Self end, lists:usort([Self | Peers]) -- [M])).

%% @doc Once the stable vector `V' holds every operation this copy gave up, no member lacks
%% one: their keys are forgotten, and `true' says that every unstable key is to be looked at
%% (stabilization finds the keys of stable operations in the log, and these left it).
-spec settled(hm_vv:vv(), #t{}) -> {#t{}, boolean()}.
settled(V, T = #t{given_up_keys = Keys, tcsb = B}) when Keys =:= all; map_size(Keys) > 0 ->
    case hm_vv:leq(hm_tcsb:given_up(B), V) of
        true -> {T#t{given_up_keys = #{}, pushed = #{}}, true};
        false -> {T, false}
    end;
settled(_, T) -> {T, false}.

%% @doc Whether a state was sent because this copy lacked what its sender gave up (the
%% state then says what that was).
-spec is_pushed(map()) -> boolean().
is_pushed(#{given_up := G}) -> is_map(G);
is_pushed(_) -> false.

%% @doc Whether this copy takes a state its sender pushed: when it still lacks an operation
%% its sender gave up (it has no other way to get it; a state another member pushed may
%% have brought them all), whatever its own `catch_up' option, as long as it is a ready
%% `ram_copies' copy of a table of records.
-spec takes_pushed(map(), #t{}) -> boolean().
takes_pushed(#{given_up := G}, T = #t{tcsb = B}) ->
    hm_ec_table_catch_up:can_join(T) andalso not hm_vv:leq(G, hm_tcsb:delivered(B));
takes_pushed(_, _) -> false.
